/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * Lane liveness probes ("who notices a path died", silent side): a link that
 * stays up but drops traffic is seen only through traffic that is not
 * answered. A busy lane's transport already waits for answers (over TCP,
 * TCP_USER_TIMEOUT bounds it to UCX_MULTIRAIL_PROBE_TIMEOUT); an idle lane
 * gets a transport keepalive (uct_ep_check) every UCX_MULTIRAIL_PROBE_INTERVAL,
 * so it has something outstanding as well, and its transport reports an
 * error when that stays unanswered. Reported errors come back through the
 * worker's transport error handler, as any lane error does. Probes go to one
 * lane per rail to a peer, not to every endpoint's: the cost grows with
 * rails, not endpoints; when a lane fails, the other endpoints' lanes on
 * that rail to that peer are probed at once. Each round also runs lane
 * recovery (ucp_failover_recover.c): re-probes of failed lanes that are due.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucp_failover.h"
#include "ucp_failover_int.h"

#include <ucp/core/ucp_context.h>
#include <ucp/core/ucp_ep.h>
#include <ucp/core/ucp_ep.inl>
#include <ucp/core/ucp_worker.h>
#include <ucp/wireup/wireup_ep.h>
#include <uct/base/uct_worker.h>
#include <ucs/async/async.h>
#include <ucs/debug/log.h>


static unsigned ucp_failover_probe_progress(void *arg);


uint64_t ucp_failover_rail_key(ucp_rsc_index_t rsc_index, uint64_t peer_uuid)
{
    return peer_uuid ^ ((rsc_index + 1) * 0x9e3779b97f4a7c15ull);
}

/* Whether the lane can be probed: connected, up, not the CM lane */
static int ucp_failover_probe_lane_ok(ucp_ep_h ep, ucp_lane_index_t lane)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    uct_ep_h uct_ep       = ep->uct_eps[lane];

    return (lane != ucp_ep_get_cm_lane(ep)) && (uct_ep != NULL) &&
           !(fo->failed_lanes & UCS_BIT(lane)) && !ucp_wireup_ep_test(uct_ep);
}

static int ucp_failover_probe_ep_ok(ucp_ep_h ep)
{
    return (ucp_failover_ep(ep)->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) &&
           !(ep->flags & UCP_EP_FLAG_FAILED) &&
           (ep->cfg_index != UCP_WORKER_CFG_INDEX_NULL);
}

/*
 * Probe one lane. A transport that finds the lane dead while probing reports
 * it through the worker's error handler (which defers what it cannot do
 * inside this walk, see fw->walking), not through the return value.
 */
static void ucp_failover_probe_lane(ucp_failover_worker_t *fw, ucp_ep_h ep,
                                    ucp_lane_index_t lane)
{
    ucs_status_t status;

    /* A lane busy sending returns UCS_OK without a probe: what it has
     * outstanding is probe enough */
    ++fw->probes_sent;
    status = uct_ep_check(ep->uct_eps[lane], 0, NULL);
    if ((status != UCS_OK) && (status != UCS_ERR_NO_RESOURCE)) {
        ucs_debug("ep %p: probe of lane[%d]: %s", ep, lane,
                  ucs_status_string(status));
    }
}

void ucp_failover_probe_schedule(ucp_failover_worker_t *fw)
{
    if (fw->probe_scheduled) {
        return;
    }

    fw->probe_scheduled = 1;
    ucs_callbackq_add_safe(&fw->worker->uct->progress_q,
                           ucp_failover_probe_progress, fw,
                           UCS_CALLBACKQ_FLAG_ONESHOT);
}

/*
 * A probe round: one lane per rail to a peer (local resource, peer worker),
 * whatever the number of endpoints sharing it: a path that dies silently
 * takes all their connections with it, and the one probed finds it. Every
 * lane of a rail to be verified (a lane on it failed) is probed.
 */
static unsigned ucp_failover_probe_progress(void *arg)
{
    ucp_failover_worker_t *fw = arg;
    ucp_worker_h worker       = fw->worker;
    ucp_failover_ep_t *fo, *tmp;
    ucp_rsc_index_t rsc_index;
    ucp_lane_index_t lane;
    uint64_t key;
    ucp_ep_h ep;
    int ret;

    UCS_ASYNC_BLOCK(&worker->async);
    fw->probe_scheduled = 0;
    fw->walking         = 1;
    ++fw->probe_rounds;
    fw->round_eps = 0;
    kh_clear(ucp_failover_rail_set, &fw->probed_rails);
    ucp_failover_recover_round_begin(fw);
    /* the endpoints that negotiated failover: the others have nothing to
     * probe, acknowledge or recover */
    ucs_list_for_each_safe(fo, tmp, &fw->eps, list) {
        ep = fo->ep;
        ucp_failover_recover_ep(fw, ep);
        ucp_failover_cm_check(fw, ep);
        ucp_failover_seq_ep_connected(ep);
        ucp_failover_seq_round(ep);
        fw->round_eps += ucp_failover_probe_ep_ok(ep);
        for (lane = 0; ucp_failover_probe_ep_ok(ep) &&
                       (lane < ucp_ep_num_lanes(ep));
             ++lane) {
            if (!ucp_failover_probe_lane_ok(ep, lane)) {
                continue;
            }

            rsc_index = ucp_ep_get_rsc_index(ep, lane);
            key       = ucp_failover_rail_key(
                    rsc_index, ucp_failover_ep(ep)->peer_uuid);
            if (kh_get(ucp_failover_rail_set, &fw->verify_rails, key) !=
                kh_end(&fw->verify_rails)) {
                ucp_failover_probe_lane(fw, ep, lane);
                continue;
            }

            kh_put(ucp_failover_rail_set, &fw->probed_rails, key, &ret);
            if (ret != UCS_KH_PUT_KEY_PRESENT) {
                ucp_failover_probe_lane(fw, ep, lane);
            }
        }
    }
    kh_clear(ucp_failover_rail_set, &fw->verify_rails);
    ucp_failover_recover_round_end(fw);
    ucp_failover_log_round(worker);
    fw->walking = 0;
    UCS_ASYNC_UNBLOCK(&worker->async);
    return 0;
}

void ucp_failover_probe_rail(ucp_ep_h failed_ep, ucp_rsc_index_t rsc_index)
{
    ucp_worker_h worker       = failed_ep->worker;
    ucp_failover_worker_t *fw = worker->failover;
    int ret;

    if ((fw == NULL) || (rsc_index == UCP_NULL_RESOURCE)) {
        return;
    }

    /* Recorded, and probed from progress: this may run inside a walk of the
     * worker's endpoints, or inside a transport's error handler */
    UCS_ASYNC_BLOCK(&worker->async);
    kh_put(ucp_failover_rail_set, &fw->verify_rails,
           ucp_failover_rail_key(rsc_index,
                                       ucp_failover_ep(failed_ep)->peer_uuid),
           &ret);
    ucp_failover_probe_schedule(fw);
    UCS_ASYNC_UNBLOCK(&worker->async);
}

/*
 * Async timer: a probe round is due; it runs from the worker's progress. A
 * user asleep in ucp_worker_wait() (or on the worker's event fd) is woken for
 * it while the worker has failover endpoints, or a silent fault on an idle
 * rail would stay unseen (and a failed rail unprobed) until the application
 * next progresses. A worker whose last round found no failover endpoint is
 * not woken.
 */
static void ucp_failover_probe_timer(int id, ucs_event_set_types_t events,
                                     void *arg)
{
    ucp_failover_worker_t *fw = arg;

    if (fw->worker->num_all_eps == 0) {
        return;
    }

    /* also when a round was queued already (from the async side, e.g. by a
     * transport error, without a signal): the user may be asleep on it */
    ucp_failover_probe_schedule(fw);
    if ((fw->round_eps != 0) || (fw->probe_rounds == 0)) {
        ++fw->probe_wakeups;
        ucp_worker_signal_internal(fw->worker);
    }
}

ucs_status_t ucp_failover_probe_start(ucp_failover_worker_t *fw)
{
    ucp_worker_h worker = fw->worker;
    double interval     = worker->context->config.ext.multirail.probe_interval;

    kh_init_inplace(ucp_failover_rail_set, &fw->probed_rails);
    kh_init_inplace(ucp_failover_rail_set, &fw->verify_rails);
    return ucs_async_add_timer(worker->async.mode, ucs_time_from_sec(interval),
                               ucp_failover_probe_timer, fw, &worker->async,
                               &fw->probe_timer_id);
}

static int ucp_failover_probe_cb_filter(const ucs_callbackq_elem_t *elem,
                                        void *arg)
{
    return (elem->cb == ucp_failover_probe_progress) && (elem->arg == arg);
}

void ucp_failover_probe_stop(ucp_failover_worker_t *fw)
{
    if (fw->probe_timer_id >= 0) {
        ucs_async_remove_handler(fw->probe_timer_id, 1);
        fw->probe_timer_id = -1;
    }

    ucs_callbackq_remove_if(&fw->worker->uct->progress_q,
                            ucp_failover_probe_cb_filter, fw);
    kh_destroy_inplace(ucp_failover_rail_set, &fw->probed_rails);
    kh_destroy_inplace(ucp_failover_rail_set, &fw->verify_rails);
}
