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
 * that rail to that peer are probed at once. Each round also tends the
 * endpoints that have work (ucp_failover_round_want()): lane recovery
 * (ucp_failover_recover.c, re-probes of failed lanes that are due), a CM
 * loss to decide, sequencing to install, acknowledgements and backlogs
 * owed. Healthy idle endpoints cost a round nothing but the probe of their
 * rails, shared with their peer's other endpoints.
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
 * The endpoints with work (fw->round_eps_list): lanes to recover, a CM loss
 * to decide, sequencing to install, acknowledgements or backlogs owed. An
 * endpoint leaves the list once it has none; what gives it work again puts
 * it back (ucp_failover_round_want()). Healthy idle endpoints are not here.
 */
static void ucp_failover_probe_tend(ucp_failover_worker_t *fw)
{
    ucp_failover_ep_t *fo, *tmp;
    ucp_ep_h ep;
    int more;

    ucs_list_for_each_safe(fo, tmp, &fw->round_eps_list, round_list) {
        ep = fo->ep;
        ++fw->round_visits;
        more  = ucp_failover_recover_ep(fw, ep);
        more |= ucp_failover_cm_check(fw, ep);
        more |= ucp_failover_seq_install(ep);
        more |= ucp_failover_seq_round(ep);
        if (!more) {
            ucs_list_del(&fo->round_list);
            fo->flags &= ~UCP_FAILOVER_EP_FLAG_ROUND;
        }
    }
}

/* The resources of the lanes of @a peer's endpoints */
static void ucp_failover_probe_peer_rails(ucp_failover_peer_t *peer)
{
    ucp_failover_ep_t *fo;
    ucp_lane_index_t lane;
    ucp_ep_h ep;

    UCS_BITMAP_CLEAR(&peer->rails);
    ucs_list_for_each(fo, &peer->eps, peer_list) {
        ep = fo->ep;
        if (ep->cfg_index == UCP_WORKER_CFG_INDEX_NULL) {
            continue;
        }

        for (lane = 0; lane < ucp_ep_num_lanes(ep); ++lane) {
            if (lane != ucp_ep_get_cm_lane(ep)) {
                UCS_BITMAP_SET(peer->rails, ucp_ep_get_rsc_index(ep, lane));
            }
        }
    }

    peer->rails_stale = 0;
}

/* Whether a rail is being verified (a lane on it failed) */
static int ucp_failover_probe_verifying(ucp_failover_worker_t *fw)
{
    return (kh_size(&fw->verify_now) + kh_size(&fw->verify_rails)) != 0;
}

/* Whether every lane on @a rsc_index to @a peer_uuid is probed this round */
static int ucp_failover_probe_verify(ucp_failover_worker_t *fw,
                                     ucp_rsc_index_t rsc_index,
                                     uint64_t peer_uuid)
{
    uint64_t rail;

    if (!ucp_failover_probe_verifying(fw)) {
        return 0;
    }

    rail = ucp_failover_rail_key(rsc_index, peer_uuid);
    return (kh_get(ucp_failover_rail_set, &fw->verify_now, rail) !=
            kh_end(&fw->verify_now)) ||
           (kh_get(ucp_failover_rail_set, &fw->verify_rails, rail) !=
            kh_end(&fw->verify_rails));
}

/*
 * Probe one lane per rail of @a peer: its endpoints are walked until each
 * rail of theirs has had a lane probed; usually the first endpoint covers
 * them all. A rail whose lanes cannot be probed (failed, still connecting)
 * has the walk go on to the peer's other endpoints, and a rail to be
 * verified (a lane on it failed) has every lane on it probed: then all the
 * peer's endpoints are walked (work in proportion to failed lanes).
 */
static void ucp_failover_probe_peer(ucp_failover_worker_t *fw,
                                    ucp_failover_peer_t *peer)
{
    ucp_tl_bitmap_t seen, left;
    ucp_rsc_index_t rsc_index;
    ucp_failover_ep_t *fo;
    ucp_lane_index_t lane;
    ucp_ep_h ep;

    if (peer->rails_stale) {
        ucp_failover_probe_peer_rails(peer);
    }

    UCS_BITMAP_CLEAR(&seen);
    ucs_list_for_each(fo, &peer->eps, peer_list) {
        ep = fo->ep;
        ++fw->round_visits;
        if (!ucp_failover_probe_ep_ok(ep)) {
            continue;
        }

        ++fw->round_eps;
        for (lane = 0; lane < ucp_ep_num_lanes(ep); ++lane) {
            if (!ucp_failover_probe_lane_ok(ep, lane)) {
                /* the CM lane, or failed or still connecting: another
                 * endpoint's lane on that rail is probed, if there is one */
                continue;
            }

            rsc_index = ucp_ep_get_rsc_index(ep, lane);
            if (ucp_failover_probe_verify(fw, rsc_index, peer->uuid)) {
                ucp_failover_probe_lane(fw, ep, lane);
            } else if (!UCS_BITMAP_GET(seen, rsc_index)) {
                ucp_failover_probe_lane(fw, ep, lane);
            }

            UCS_BITMAP_SET(seen, rsc_index);
        }

        /* every rail of the peer had its lane (a probe may have found a
         * dead one just now: its rail is verified at once) */
        left = UCP_TL_BITMAP_AND_NOT(peer->rails, seen);
        if (!ucp_failover_probe_verifying(fw) &&
            UCS_BITMAP_IS_ZERO_INPLACE(&left)) {
            break;
        }
    }
}

/*
 * A probe round: the endpoints with work are tended, then one lane per rail
 * to a peer (local resource, peer worker) is probed, whatever the number of
 * endpoints sharing it: a path that dies silently takes all their
 * connections with it, and the one probed finds it. Every lane of a rail to
 * be verified (a lane on it failed) is probed. The work grows with the
 * endpoints that have work and with the rails to peers, not with healthy
 * endpoints.
 */
static unsigned ucp_failover_probe_progress(void *arg)
{
    ucp_failover_worker_t *fw = arg;
    ucp_worker_h worker       = fw->worker;
    khash_t(ucp_failover_rail_set) verify;
    ucp_failover_peer_t *peer;

    UCS_ASYNC_BLOCK(&worker->async);
    /* the rails to verify now; those found during the round are verified
     * in it too, and again in the next */
    verify           = fw->verify_now;
    fw->verify_now   = fw->verify_rails;
    fw->verify_rails = verify;
    kh_clear(ucp_failover_rail_set, &fw->verify_rails);
    fw->probe_scheduled = 0;
    fw->walking         = 1;
    ++fw->probe_rounds;
    fw->round_eps = 0;
    ucp_failover_recover_round_begin(fw);
    ucp_failover_probe_tend(fw);
    kh_foreach_value(&fw->peers, peer, {
        ucp_failover_probe_peer(fw, peer);
    });
    kh_clear(ucp_failover_rail_set, &fw->verify_now);
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

    kh_init_inplace(ucp_failover_rail_set, &fw->verify_rails);
    kh_init_inplace(ucp_failover_rail_set, &fw->verify_now);
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
    kh_destroy_inplace(ucp_failover_rail_set, &fw->verify_rails);
    kh_destroy_inplace(ucp_failover_rail_set, &fw->verify_now);
}
