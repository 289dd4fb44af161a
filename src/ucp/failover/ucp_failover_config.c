/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucp_failover.h"

#include <ucp/core/ucp_context.h>
#include <ucs/debug/log.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/sys/string.h>
#include <ucs/time/time.h>


ucs_config_field_t ucp_multirail_config_table[] = {
  {"MULTIRAIL_FAILOVER", "n",
   "Keep an endpoint alive when one of its rails (lanes) fails: the failed lane\n"
   "is marked dead, its work moves to the surviving lanes and the error callback\n"
   "is called only when no lane is left. Both peers must enable it; with a peer\n"
   "that does not, the endpoint behaves as if it were off.",
   ucs_offsetof(ucp_multirail_config_t, enable), UCS_CONFIG_TYPE_BOOL},

  {"MULTIRAIL_LINK_EVENTS", "y",
   "Watch the link state of the network devices behind the lanes (rtnetlink):\n"
   "when a device is set down, loses carrier or is removed, every lane on it\n"
   "fails over at once, on every endpoint of the worker, instead of when the\n"
   "transport notices.",
   ucs_offsetof(ucp_multirail_config_t, link_events), UCS_CONFIG_TYPE_BOOL},

  {"MULTIRAIL_PROBE_INTERVAL", "100ms",
   "How often a lane with no completed work is probed for liveness.",
   ucs_offsetof(ucp_multirail_config_t, probe_interval), UCS_CONFIG_TYPE_TIME},

  {"MULTIRAIL_PROBE_TIMEOUT", "300ms",
   "A lane whose outstanding work or probes stay unanswered for longer than this\n"
   "is declared failed. Must be larger than MULTIRAIL_PROBE_INTERVAL. It is the\n"
   "transports' failure timeout too: each sets its own timeouts from it where\n"
   "the user did not (TCP: TCP_USER_TIMEOUT two thirds of it less the least\n"
   "retransmission timeout, UCX_TCP_RTO_MIN a third of it within 50-200 ms,\n"
   "non-blocking connect; RC: QP timeout and retry count within 80% of it).",
   ucs_offsetof(ucp_multirail_config_t, probe_timeout), UCS_CONFIG_TYPE_TIME},

  {"MULTIRAIL_REPROBE_INTERVAL", "200ms",
   "Delay before the first attempt to re-establish a failed lane; the delay\n"
   "doubles after each failed attempt, up to MULTIRAIL_REPROBE_MAX_INTERVAL.",
   ucs_offsetof(ucp_multirail_config_t, reprobe_interval), UCS_CONFIG_TYPE_TIME},

  {"MULTIRAIL_REPROBE_MAX_INTERVAL", "3s",
   "Upper bound of the delay between two attempts to re-establish a failed\n"
   "lane, so a rail that heals without a link-up event is used again at most\n"
   "this long (and an attempt) later. A lane that fails again sooner than this\n"
   "after it came back is flapping: its re-probes start from a longer delay.",
   ucs_offsetof(ucp_multirail_config_t, reprobe_max_interval),
   UCS_CONFIG_TYPE_TIME},

  {"MULTIRAIL_REPROBE_MAX_ATTEMPTS", "inf",
   "How many times a failed lane is re-probed before it is given up for the\n"
   "lifetime of the endpoint; \"inf\" never gives up.",
   ucs_offsetof(ucp_multirail_config_t, reprobe_max_attempts),
   UCS_CONFIG_TYPE_ULUNITS},

  {"MULTIRAIL_RETAIN", "1m",
   "Per endpoint, how many bytes of messages (everything sent on the am lane,\n"
   "and message fragments on other lanes, MULTIRAIL_STRIPE_AM) are kept until\n"
   "the peer acknowledges them, to be sent again if their lane fails; counted\n"
   "by the buffers that hold them. When the bound is reached, new messages\n"
   "wait (they are queued as pending) until acknowledgements free room. At\n"
   "least 64k; \"inf\" never holds messages back.",
   ucs_offsetof(ucp_multirail_config_t, retain), UCS_CONFIG_TYPE_MEMUNITS},

  {"MULTIRAIL_RETAIN_WORKER", "256m",
   "Per worker, how many bytes all its endpoints together keep as\n"
   "MULTIRAIL_RETAIN counts them (and the trackers of rendezvous fragments in\n"
   "flight, a few dozen bytes each). When the bound is reached, new messages of\n"
   "every endpoint of the worker wait until acknowledgements free room. At\n"
   "least MULTIRAIL_RETAIN (when that is a size); \"inf\" bounds each\n"
   "endpoint only.",
   ucs_offsetof(ucp_multirail_config_t, retain_worker),
   UCS_CONFIG_TYPE_MEMUNITS},

  {"MULTIRAIL_STRIPE_AM", "y",
   "With UCX_MAX_EAGER_RAILS > 1, let the middle fragments of eager and AM\n"
   "messages (and rendezvous data sent as active messages) stripe over the\n"
   "lanes besides the am lane. Each such lane keeps its fragments, within\n"
   "MULTIRAIL_RETAIN, until the peer acknowledges them, and they are sent\n"
   "again on the am lane if the lane fails. With \"n\", or when the lanes'\n"
   "active-message limits differ, they ride the am lane only.",
   ucs_offsetof(ucp_multirail_config_t, stripe_am), UCS_CONFIG_TYPE_BOOL},

  {"MULTIRAIL_REF_THRESH", "auto",
   "A zero-copy active message (eager, AM, stream, or rendezvous data sent as\n"
   "active messages) of at least this many bytes is sent by reference: from\n"
   "the user's buffer, which is not copied, and its request completes when\n"
   "the peer has acknowledged it. A smaller one is copied into a retained\n"
   "buffer and its request completes as the transport's does. \"auto\" (the\n"
   "default): by reference over transports whose memory domain needs memory\n"
   "handles (RDMA: their own zero-copy completion waits for the peer too),\n"
   "every such message; copied over the others (TCP: a round trip later than\n"
   "UCT/TCP's local completion costs more bandwidth than the copy, a sender\n"
   "that waits for each send before the next loses a third). \"inf\" copies\n"
   "every message; a size, e.g. 8k, sends messages of that size and more by\n"
   "reference over every transport. Over RDMA the trailer goes from\n"
   "registered buffers, and a message sent again on another device's lane\n"
   "is copied.",
   ucs_offsetof(ucp_multirail_config_t, ref_thresh), UCS_CONFIG_TYPE_MEMUNITS},

  {NULL}
};


static ucs_status_t ucp_multirail_check_positive(const char *name, double value)
{
    if (value > 0) {
        return UCS_OK;
    }

    ucs_error("UCX_MULTIRAIL_%s must be a positive time (got %.3f ms)", name,
              value * UCS_MSEC_PER_SEC);
    return UCS_ERR_INVALID_PARAM;
}

/* A retention bound (NAME): a size of at least 64k, or "inf"; "auto" is
 * not a bound, and a smaller one would stall every endpoint on its
 * acknowledgements. HINT says what the size must be. */
static ucs_status_t ucp_failover_config_check_bound(const char *name,
                                                    const char *hint,
                                                    size_t value)
{
    if (value == UCS_MEMUNITS_AUTO) {
        ucs_error("%s must be a size (%s) or \"inf\", not \"auto\"", name,
                  hint);
        return UCS_ERR_INVALID_PARAM;
    }

    if (value < (64 * UCS_KBYTE)) {
        ucs_error("%s must be at least 64k (got %zu bytes): a smaller bound "
                  "would stall every endpoint on its acknowledgements", name,
                  value);
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}

ucs_status_t
ucp_multirail_config_check(const struct ucp_context_config *ctx_config)
{
    const ucp_multirail_config_t *config = &ctx_config->multirail;
    ucs_status_t status;

    if (config->enable && ctx_config->proto_enable) {
        /* The failover hooks live in the protocols of UCX 1.13's default
         * stack (proto v1): under proto v2 a failed lane's requests would be
         * replayed by code that knows nothing of failover */
        ucs_error("UCX_MULTIRAIL_FAILOVER=y does not work with "
                  "UCX_PROTO_ENABLE=y (the new protocols): set one of them "
                  "to n");
        return UCS_ERR_UNSUPPORTED;
    }

    if (config->enable &&
        (ctx_config->atomic_mode == UCP_ATOMIC_MODE_DEVICE)) {
        /* not an error: nothing is lost, atomics take the other way */
        ucs_warn("UCX_ATOMIC_MODE=device is not followed with "
                 "UCX_MULTIRAIL_FAILOVER=y: atomics over the network go to "
                 "the peer's CPU on the sequenced am lane, as with "
                 "UCX_ATOMIC_MODE=cpu (a device atomic in flight on a "
                 "failing lane could not be sent again exactly once)");
    }

    status = ucp_multirail_check_positive("PROBE_INTERVAL",
                                          config->probe_interval);
    if (status != UCS_OK) {
        return status;
    }

    status = ucp_multirail_check_positive("PROBE_TIMEOUT",
                                          config->probe_timeout);
    if (status != UCS_OK) {
        return status;
    }

    status = ucp_multirail_check_positive("REPROBE_INTERVAL",
                                          config->reprobe_interval);
    if (status != UCS_OK) {
        return status;
    }

    if (config->probe_timeout <= config->probe_interval) {
        ucs_error("UCX_MULTIRAIL_PROBE_TIMEOUT (%.3f ms) must be larger than "
                  "UCX_MULTIRAIL_PROBE_INTERVAL (%.3f ms), or healthy idle "
                  "lanes would be declared failed",
                  config->probe_timeout * UCS_MSEC_PER_SEC,
                  config->probe_interval * UCS_MSEC_PER_SEC);
        return UCS_ERR_INVALID_PARAM;
    }

    if (config->reprobe_max_interval < config->reprobe_interval) {
        ucs_error("UCX_MULTIRAIL_REPROBE_MAX_INTERVAL (%.3f ms) must not be "
                  "smaller than UCX_MULTIRAIL_REPROBE_INTERVAL (%.3f ms)",
                  config->reprobe_max_interval * UCS_MSEC_PER_SEC,
                  config->reprobe_interval * UCS_MSEC_PER_SEC);
        return UCS_ERR_INVALID_PARAM;
    }

    if (config->reprobe_max_attempts == 0) {
        ucs_error("UCX_MULTIRAIL_REPROBE_MAX_ATTEMPTS must be at least 1 or "
                  "\"inf\"");
        return UCS_ERR_INVALID_PARAM;
    }

    status = ucp_failover_config_check_bound("UCX_MULTIRAIL_RETAIN",
                                             "at least 64k", config->retain);
    if (status != UCS_OK) {
        return status;
    }

    status = ucp_failover_config_check_bound("UCX_MULTIRAIL_RETAIN_WORKER",
                                             "at least UCX_MULTIRAIL_RETAIN",
                                             config->retain_worker);
    if (status != UCS_OK) {
        return status;
    }

    if ((config->retain != UCS_MEMUNITS_INF) &&
        (config->retain_worker < config->retain)) {
        ucs_error("UCX_MULTIRAIL_RETAIN_WORKER (%zu bytes) must not be smaller "
                  "than UCX_MULTIRAIL_RETAIN (%zu bytes)",
                  config->retain_worker, config->retain);
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}

size_t ucp_failover_ref_thresh(ucp_context_h context, int need_memh)
{
    size_t thresh = context->config.ext.multirail.ref_thresh;

    if (thresh != UCS_MEMUNITS_AUTO) {
        return thresh;
    }

    return need_memh ? 0 : UCS_MEMUNITS_INF;
}
