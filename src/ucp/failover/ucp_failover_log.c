/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * What the operator reads in the log: rail events per worker, not per
 * endpoint. A rail that fails (or comes back) under many endpoints is one
 * event: the first endpoint's lines are logged at info level at once, the
 * others' at debug level, and when the event is over (the rail changes
 * direction, or no endpoint followed for UCP_FAILOVER_LOG_EVENT_GAP) one
 * info line counts them: with 1,024 endpoints a rail fault writes two info
 * lines per worker, not 1,024. At the worker's cleanup a one-line summary
 * gives its lane failures, recoveries, requests moved and the time it was
 * degraded (at least one lane of a live endpoint failed).
 *
 * Imports: none of the other failover parts; lane failover (lane.c) and
 * recovery (recover.c) report to it, the probe round closes idle events.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucp_failover.h"
#include "ucp_failover_int.h"

#include <ucp/core/ucp_context.h>
#include <ucp/core/ucp_worker.h>
#include <ucs/debug/log.h>
#include <ucs/time/time.h>


/* An event is over when no endpoint joined it for this long (seconds) */
#define UCP_FAILOVER_LOG_EVENT_GAP 1.0


static ucp_failover_log_t *ucp_failover_log_of(ucp_worker_h worker)
{
    ucp_failover_worker_t *fw = worker->failover;

    return (fw == NULL) ? NULL : &fw->log;
}

static void ucp_failover_log_event_end(ucp_worker_h worker,
                                       ucp_rsc_index_t rsc_index)
{
    ucp_failover_log_t *log          = ucp_failover_log_of(worker);
    ucp_failover_log_event_t *ev     = &log->rsc[rsc_index];
    const uct_tl_resource_desc_t *tl =
            &worker->context->tl_rscs[rsc_index].tl_rsc;

    if (ev->first == 0) {
        return;
    }

    /* one endpoint: its own line said it all */
    if (ev->num_eps > 1) {
        if (ev->up) {
            ucs_info("worker %p: %s/%s is back on %u lane(s) within "
                     "%.3f s (the first logged above, the others at debug "
                     "level)", worker, tl->tl_name, tl->dev_name, ev->num_eps,
                     ucs_time_to_sec(ev->last - ev->first));
        } else {
            ucs_info("worker %p: %s/%s failed on %u lane(s) within "
                     "%.3f s, %zu pending request(s) moved (the first logged "
                     "above, the others at debug level)", worker, tl->tl_name,
                     tl->dev_name, ev->num_eps,
                     ucs_time_to_sec(ev->last - ev->first), ev->num_moved);
        }
    }

    ev->first     = 0;
    ev->num_eps   = 0;
    ev->num_moved = 0;
}

/* A lane of a live endpoint failed (+1) or is back or gone (-1) */
static void ucp_failover_log_count_failed(ucp_failover_log_t *log, int delta,
                                          ucs_time_t now)
{
    if ((delta > 0) && (log->failed_now == 0)) {
        log->degraded_since = now;
    }

    ucs_assert((delta > 0) || (log->failed_now >= -delta));
    log->failed_now += delta;
    if ((delta < 0) && (log->failed_now == 0)) {
        log->degraded += now - log->degraded_since;
    }
}

void ucp_failover_log_init(ucp_failover_log_t *log)
{
    memset(log, 0, sizeof(*log));
    log->level = UCS_LOG_LEVEL_INFO;
    log->start = ucs_get_time();
}

void ucp_failover_log_lane_event(ucp_worker_h worker,
                                 ucp_rsc_index_t rsc_index, int up)
{
    ucp_failover_log_t *log = ucp_failover_log_of(worker);
    ucs_time_t now          = ucs_get_time();
    ucp_failover_log_event_t *ev;

    if (log == NULL) {
        return;
    }

    if (up) {
        ++log->recoveries;
        ucp_failover_log_count_failed(log, -1, now);
    } else {
        ++log->failures;
        ucp_failover_log_count_failed(log, 1, now);
    }

    if (rsc_index == UCP_NULL_RESOURCE) {
        log->level = UCS_LOG_LEVEL_INFO;
        return;
    }

    ev = &log->rsc[rsc_index];
    if ((ev->first != 0) && (ev->up != up)) {
        /* the rail turned: the event in the other direction is over */
        ucp_failover_log_event_end(worker, rsc_index);
    }

    if (ev->first == 0) {
        ev->first  = now;
        ev->up     = up;
        log->level = UCS_LOG_LEVEL_INFO;
    } else {
        log->level = UCS_LOG_LEVEL_DEBUG;
    }

    ev->last = now;
    ++ev->num_eps;
}

void ucp_failover_log_moved(ucp_worker_h worker, ucp_rsc_index_t rsc_index,
                            size_t count)
{
    ucp_failover_log_t *log = ucp_failover_log_of(worker);

    if (log == NULL) {
        return;
    }

    log->moved += count;
    if (rsc_index != UCP_NULL_RESOURCE) {
        log->rsc[rsc_index].num_moved += count;
    }
}

ucs_log_level_t ucp_failover_log_level(ucp_worker_h worker)
{
    ucp_failover_log_t *log = ucp_failover_log_of(worker);

    return (log == NULL) ? UCS_LOG_LEVEL_INFO : log->level;
}

void ucp_failover_log_level_reset(ucp_worker_h worker)
{
    ucp_failover_log_t *log = ucp_failover_log_of(worker);

    if (log != NULL) {
        log->level = UCS_LOG_LEVEL_INFO;
    }
}

void ucp_failover_log_ep_gone(ucp_worker_h worker, unsigned failed_lanes,
                              uint64_t redriven)
{
    ucp_failover_log_t *log = ucp_failover_log_of(worker);
    ucs_time_t now          = ucs_get_time();

    if (log == NULL) {
        return;
    }

    log->redriven += redriven;
    if (failed_lanes > 0) {
        ucp_failover_log_count_failed(log, -(int)failed_lanes, now);
    }
}

void ucp_failover_log_round(ucp_worker_h worker)
{
    ucp_failover_log_t *log = ucp_failover_log_of(worker);
    ucs_time_t gap          = ucs_time_from_sec(UCP_FAILOVER_LOG_EVENT_GAP);
    ucs_time_t now;
    ucp_rsc_index_t rsc_index;

    if ((log == NULL) || (log->failures == 0)) {
        return;
    }

    now = ucs_get_time();
    for (rsc_index = 0; rsc_index < worker->context->num_tls; ++rsc_index) {
        if ((log->rsc[rsc_index].first != 0) &&
            ((now - log->rsc[rsc_index].last) >= gap)) {
            ucp_failover_log_event_end(worker, rsc_index);
        }
    }
}

void ucp_failover_log_cleanup(ucp_worker_h worker)
{
    ucp_failover_log_t *log = ucp_failover_log_of(worker);
    ucs_time_t now          = ucs_get_time();
    ucs_time_t degraded;
    ucp_rsc_index_t rsc_index;

    if (log == NULL) {
        return;
    }

    for (rsc_index = 0; rsc_index < worker->context->num_tls; ++rsc_index) {
        ucp_failover_log_event_end(worker, rsc_index);
    }

    degraded = log->degraded;
    if (log->failed_now > 0) {
        degraded += now - log->degraded_since;
    }

    ucs_info("worker %p: failover summary: %" PRIu64 " lane failure(s), %"
             PRIu64 " lane(s) back, %" PRIu64 " pending request(s) moved, %"
             PRIu64 " re-driven; degraded %.3f s of %.3f s", worker,
             log->failures, log->recoveries, log->moved, log->redriven,
             ucs_time_to_sec(degraded), ucs_time_to_sec(now - log->start));
}
