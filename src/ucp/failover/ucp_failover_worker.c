/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * The worker's rail monitor: maps the devices behind the worker's interfaces
 * to lanes. A device event (link watcher, IB port event, a test) is recorded
 * from whatever context it arrives in, and handled on the progress thread:
 * every lane of every endpoint of the worker on that device fails over at
 * once; a device that comes back has its failed lanes re-probed at once.
 * Lane liveness probes (ucp_failover_probe.c) and lane recovery
 * (ucp_failover_recover.c) hang off it as well.
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
#include <ucp/core/ucp_worker.inl>
#include <ucp/wireup/wireup_ep.h>
#include <uct/base/uct_worker.h>
#include <ucs/arch/atomic.h>
#include <ucs/async/async.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/dev_event.h>
#include <ucs/sys/string.h>

#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static int ucp_failover_link_event_is_down(ucp_failover_link_event_t event)
{
    return (event == UCP_FAILOVER_LINK_ADMIN_DOWN) ||
           (event == UCP_FAILOVER_LINK_NO_CARRIER) ||
           (event == UCP_FAILOVER_LINK_REMOVED) ||
           (event == UCP_FAILOVER_LINK_PORT_ERR);
}

/*
 * The network device a resource runs on, as its transport tells it
 * (uct_iface_query_netdev: the device itself for TCP, the port's netdev for
 * a RoCE port); none for anything else (an InfiniBand port is watched
 * through its port events) or a resource without an interface here.
 */
static void ucp_failover_rsc_netdev(ucp_worker_h worker,
                                    ucp_rsc_index_t rsc_index, char *netdev,
                                    size_t max)
{
    ucp_worker_iface_t *wiface;

    netdev[0] = '\0';
    if ((worker->context->tl_rscs[rsc_index].tl_rsc.dev_type !=
         UCT_DEVICE_TYPE_NET) ||
        !UCS_BITMAP_GET(worker->context->tl_bitmap, rsc_index)) {
        return;
    }

    wiface = ucp_worker_iface(worker, rsc_index);
    if ((wiface == NULL) || (wiface->iface == NULL) ||
        (uct_iface_query_netdev(wiface->iface, netdev, max) != UCS_OK)) {
        netdev[0] = '\0';
    }
}

static unsigned ucp_failover_worker_event_progress(void *arg);

/*
 * Record a device event of @a rsc_index and have the progress thread handle
 * it. Lock-free: events come from async threads (link watcher, IB async
 * events) that must not wait for the worker.
 */
static void ucp_failover_worker_record(ucp_failover_worker_t *fw,
                                       ucp_rsc_index_t rsc_index,
                                       ucp_failover_link_event_t event)
{
    if (ucp_failover_link_event_is_down(event)) {
        ucs_atomic_swap8(&fw->rsc_event[rsc_index], event);
    } else {
        /* kept apart: a down event followed by an up event is both */
        ucs_atomic_swap8(&fw->rsc_up[rsc_index], 1);
    }

    if (ucs_atomic_cswap32(&fw->event_scheduled, 0, 1) != 0) {
        return; /* a handler is queued and has not read the events yet */
    }

    /* The callback queue's own lock only: never the worker's async lock,
     * which a device-event poster (the shared async thread) must not wait
     * for */
    ucs_callbackq_add_safe(&fw->worker->uct->progress_q,
                           ucp_failover_worker_event_progress, fw,
                           UCS_CALLBACKQ_FLAG_ONESHOT);
    /* A user waiting on the worker's event fd should progress now */
    ucp_worker_signal_internal(fw->worker);
}

void ucp_failover_worker_device_event(ucp_worker_h worker,
                                      const char *dev_name,
                                      ucp_failover_link_event_t event)
{
    ucp_failover_worker_t *fw = worker->failover;
    ucp_context_h context     = worker->context;
    const uct_tl_resource_desc_t *tl_rsc;
    ucp_failover_link_event_t state;
    ucp_rsc_index_t rsc_index;

    if (fw == NULL) {
        return;
    }

    for (rsc_index = 0; rsc_index < context->num_tls; ++rsc_index) {
        tl_rsc = &context->tl_rscs[rsc_index].tl_rsc;
        if (event == UCP_FAILOVER_LINK_RESYNC) {
            /* Events were lost: look at every watched device */
            if (fw->netdev[rsc_index][0] == '\0') {
                continue;
            }

            state = ucp_failover_link_query(fw->netdev[rsc_index]);
            if (ucp_failover_link_event_is_down(state)) {
                ucp_failover_worker_record(fw, rsc_index, state);
            }
        } else if ((dev_name != NULL) &&
                   (!strcmp(fw->netdev[rsc_index], dev_name) ||
                    !strcmp(tl_rsc->dev_name, dev_name))) {
            ucs_debug("worker %p: %s on %s (%s/%s)", worker,
                      ucp_failover_link_event_str(event), dev_name,
                      tl_rsc->tl_name, tl_rsc->dev_name);
            if (ucp_failover_link_event_is_down(event) ||
                (event == UCP_FAILOVER_LINK_UP) ||
                (event == UCP_FAILOVER_LINK_PORT_ACTIVE)) {
                ucp_failover_worker_record(fw, rsc_index, event);
            }
        }
    }
}

int ucp_failover_link_is_down(const char *netdev)
{
    return (netdev[0] != '\0') &&
           ucp_failover_link_event_is_down(ucp_failover_link_query(netdev));
}

static void ucp_failover_worker_link_cb(void *arg, const char *ifname,
                                        ucp_failover_link_event_t event)
{
    ucp_failover_worker_t *fw = arg;

    ucp_failover_worker_device_event(fw->worker, ifname, event);
}

/* Device events posted by transports (an IB port error) */
static void ucp_failover_worker_dev_event_cb(void *arg, const char *dev_name,
                                             ucs_dev_event_t event)
{
    ucp_failover_worker_t *fw = arg;

    ucp_failover_worker_device_event(fw->worker, dev_name,
                                     (event == UCS_DEV_EVENT_PORT_ERR) ?
                                             UCP_FAILOVER_LINK_PORT_ERR :
                                             UCP_FAILOVER_LINK_PORT_ACTIVE);
}

void ucp_failover_ep_lane_fault(ucp_ep_h ep, ucp_lane_index_t lane,
                                const char *reason, ucs_status_t status)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);

    if ((ep->flags & UCP_EP_FLAG_FAILED) ||
        (ep->cfg_index == UCP_WORKER_CFG_INDEX_NULL) ||
        (lane >= ucp_ep_num_lanes(ep)) || (fo->failed_lanes & UCS_BIT(lane)) ||
        ucp_wireup_ep_test(ep->uct_eps[lane])) {
        /* gone already, or still being connected: wireup sees to it */
        return;
    }

    if (ucp_failover_lane_can_fail(ep, lane)) {
        ucp_failover_lane_down(ep, lane, reason, UCS_OK, 1);
        return;
    }

    /* The endpoint cannot live without this lane: fail it now rather than
     * when the transport gives up; from progress, since failing it may call
     * the user, who may destroy endpoints of the list being walked */
    ucs_diag("ep %p: lane[%d] lost (%s), the endpoint cannot continue without"
             " it", ep, lane, reason);
    ucp_ep_set_failed_schedule(ep, lane, status);
}

static void ucp_failover_ep_devices_down(ucp_failover_worker_t *fw,
                                         ucp_ep_h ep, const uint8_t *events)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    ucp_lane_index_t fatal_lane = UCP_NULL_LANE;
    char reason[64];
    ucp_rsc_index_t rsc_index;
    ucp_lane_index_t lane;

    if (!(fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) ||
        (ep->flags & UCP_EP_FLAG_FAILED) ||
        (ep->cfg_index == UCP_WORKER_CFG_INDEX_NULL)) {
        /* an endpoint without failover keeps stock behaviour */
        return;
    }

    /* Lanes that may fail over alone first, then a lane the endpoint cannot
     * live without */
    for (lane = 0; lane < ucp_ep_num_lanes(ep); ++lane) {
        rsc_index = ucp_ep_get_rsc_index(ep, lane);
        if ((rsc_index == UCP_NULL_RESOURCE) || (events[rsc_index] == 0)) {
            continue;
        }

        if (!ucp_failover_lane_can_fail(ep, lane)) {
            /* the am lane first; a lane still connecting is wireup's */
            if (!(fo->failed_lanes & UCS_BIT(lane)) &&
                !ucp_wireup_ep_test(ep->uct_eps[lane]) &&
                ((fatal_lane == UCP_NULL_LANE) ||
                 (lane == ucp_ep_get_am_lane(ep)))) {
                fatal_lane = lane;
            }
            continue;
        }

        ucs_snprintf_zero(reason, sizeof(reason), "%s on %s",
                          ucp_failover_link_event_str(events[rsc_index]),
                          fw->netdev[rsc_index]);
        ucp_failover_ep_lane_fault(ep, lane, reason, UCS_ERR_ENDPOINT_TIMEOUT);
    }

    if (fatal_lane != UCP_NULL_LANE) {
        rsc_index = ucp_ep_get_rsc_index(ep, fatal_lane);
        ucs_snprintf_zero(reason, sizeof(reason), "%s on %s",
                          ucp_failover_link_event_str(events[rsc_index]),
                          fw->netdev[rsc_index]);
        ucp_failover_ep_lane_fault(ep, fatal_lane, reason,
                                   UCS_ERR_ENDPOINT_TIMEOUT);
    }
}

static unsigned ucp_failover_worker_event_progress(void *arg)
{
    ucp_failover_worker_t *fw = arg;
    ucp_worker_h worker       = fw->worker;
    uint8_t events[UCP_MAX_RESOURCES];
    uint8_t ups[UCP_MAX_RESOURCES];
    ucp_failover_ep_t *fo, *tmp;
    ucp_rsc_index_t rsc_index;
    int any_up = 0;

    /* Allow the next event to queue a handler before reading this one's:
     * an event recorded from now on is handled, here or next time */
    ucs_atomic_swap32(&fw->event_scheduled, 0);
    for (rsc_index = 0; rsc_index < UCP_MAX_RESOURCES; ++rsc_index) {
        events[rsc_index] = ucs_atomic_swap8(&fw->rsc_event[rsc_index],
                                             UCP_FAILOVER_LINK_NONE);
        ups[rsc_index]    = ucs_atomic_swap8(&fw->rsc_up[rsc_index], 0);
    }

    UCS_ASYNC_BLOCK(&worker->async);

    /* A device's state now, after its events: what the re-probes of its
     * failed lanes wait for (only resources that had events are queried) */
    for (rsc_index = 0; rsc_index < worker->context->num_tls; ++rsc_index) {
        if ((events[rsc_index] == UCP_FAILOVER_LINK_NONE) && !ups[rsc_index]) {
            continue;
        }

        fw->link_down[rsc_index] =
                ucp_failover_link_is_down(fw->netdev[rsc_index]);
    }

    /* A device came back: the next probe round re-probes its failed lanes
     * at once (ucp_failover_recover.c) */
    for (rsc_index = 0; rsc_index < UCP_MAX_RESOURCES; ++rsc_index) {
        if (ups[rsc_index]) {
            fw->up_events[rsc_index] = 1;
            any_up                   = 1;
        }
    }

    if (any_up) {
        ucp_failover_probe_schedule(fw);
    }

    fw->walking = 1;
    ucs_list_for_each_safe(fo, tmp, &fw->eps, list) {
        ucp_failover_ep_devices_down(fw, fo->ep, events);
    }
    fw->walking = 0;

    UCS_ASYNC_UNBLOCK(&worker->async);
    return 1;
}

size_t ucp_failover_worker_held(ucp_worker_h worker)
{
    return (worker->failover == NULL) ?
           0 : ucp_failover_pool_held(worker->failover->pool);
}

ucp_failover_pool_t *ucp_failover_worker_pool(ucp_worker_h worker)
{
    return (worker->failover == NULL) ? NULL : worker->failover->pool;
}

/* @a fo leaves its peer's list; the peer goes with its last endpoint */
static void ucp_failover_worker_peer_leave(ucp_failover_worker_t *fw,
                                           ucp_failover_ep_t *fo)
{
    ucp_failover_peer_t *peer = fo->peer;
    khiter_t iter;

    if (peer == NULL) {
        return;
    }

    ucs_list_del(&fo->peer_list);
    fo->peer          = NULL;
    peer->rails_stale = 1;
    if (!ucs_list_is_empty(&peer->eps)) {
        return;
    }

    iter = kh_get(ucp_failover_peer_map, &fw->peers, peer->uuid);
    if (iter != kh_end(&fw->peers)) {
        kh_del(ucp_failover_peer_map, &fw->peers, iter);
    }
    ucs_free(peer);
}

/* @a fo joins the list of its peer's endpoints (probe walks) */
static void ucp_failover_worker_peer_join(ucp_failover_worker_t *fw,
                                          ucp_failover_ep_t *fo)
{
    ucp_failover_peer_t *peer;
    khiter_t iter;
    int ret;

    if ((fo->peer != NULL) && (fo->peer->uuid == fo->peer_uuid)) {
        fo->peer->rails_stale = 1; /* its lanes may have changed */
        return;
    }

    ucp_failover_worker_peer_leave(fw, fo);
    iter = kh_put(ucp_failover_peer_map, &fw->peers, fo->peer_uuid, &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        goto err;
    } else if (ret == UCS_KH_PUT_KEY_PRESENT) {
        peer = kh_value(&fw->peers, iter);
    } else {
        peer = ucs_calloc(1, sizeof(*peer), "failover peer");
        if (peer == NULL) {
            kh_del(ucp_failover_peer_map, &fw->peers, iter);
            goto err;
        }

        peer->uuid = fo->peer_uuid;
        ucs_list_head_init(&peer->eps);
        kh_value(&fw->peers, iter) = peer;
    }

    ucs_list_add_tail(&peer->eps, &fo->peer_list);
    fo->peer          = peer;
    peer->rails_stale = 1;
    return;

err:
    ucs_warn("ep %p: no memory to list it by peer: silent faults of its idle "
             "lanes are not probed", fo->ep);
}

void ucp_failover_worker_ep_add(ucp_ep_h ep)
{
    ucp_failover_worker_t *fw = ep->worker->failover;
    ucp_failover_ep_t *fo     = ucp_failover_ep(ep);

    if (fw == NULL) {
        return;
    }

    UCS_ASYNC_BLOCK(&ep->worker->async);
    if (fo->list.next == NULL) {
        fo->ep = ep;
        ucs_list_add_tail(&fw->eps, &fo->list);
    }

    /* at each negotiation: the lanes (and in theory the peer) may change */
    ucp_failover_worker_peer_join(fw, fo);
    /* its lanes are connected, sequenced and probed from the rounds */
    ucp_failover_round_want(fo);
    UCS_ASYNC_UNBLOCK(&ep->worker->async);
}

void ucp_failover_worker_ep_remove(ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);

    if (fo->list.next == NULL) {
        return;
    }

    /* (the worker's cleanup unlinks every endpoint first) */
    UCS_ASYNC_BLOCK(&ep->worker->async);
    ucs_list_del(&fo->list);
    fo->list.next = fo->list.prev = NULL;
    if (fo->flags & UCP_FAILOVER_EP_FLAG_ROUND) {
        ucs_list_del(&fo->round_list);
        fo->flags &= ~UCP_FAILOVER_EP_FLAG_ROUND;
    }
    ucp_failover_worker_peer_leave(ep->worker->failover, fo);
    UCS_ASYNC_UNBLOCK(&ep->worker->async);
}

void ucp_failover_round_add(ucp_failover_ep_t *fo)
{
    ucp_worker_h worker;

    if (fo->list.next == NULL) {
        return; /* not a failover endpoint (or the shared inactive state) */
    }

    /* (from a transport's callback on the async thread too) */
    worker = fo->ep->worker;
    UCS_ASYNC_BLOCK(&worker->async);
    if (!(fo->flags & UCP_FAILOVER_EP_FLAG_ROUND) &&
        (worker->failover != NULL)) {
        fo->flags |= UCP_FAILOVER_EP_FLAG_ROUND;
        ucs_list_add_tail(&worker->failover->round_eps_list, &fo->round_list);
    }
    UCS_ASYNC_UNBLOCK(&worker->async);
}

void ucp_failover_worker_init(ucp_worker_h worker)
{
    ucp_context_h context = worker->context;
    ucp_failover_worker_t *fw;
    ucp_rsc_index_t rsc_index;
    ucs_status_t status;

    if (!ucp_failover_is_enabled(context)) {
        return;
    }

    fw = ucs_calloc(1, sizeof(*fw), "failover worker");
    if (fw == NULL) {
        ucs_warn("worker %p: no memory for the failover rail monitor, lanes "
                 "fail over on transport errors only", worker);
        return;
    }

    fw->worker         = worker;
    fw->probe_timer_id = -1;
    ucs_list_head_init(&fw->eps);
    ucs_list_head_init(&fw->round_eps_list);
    kh_init_inplace(ucp_failover_peer_map, &fw->peers);
    /* without it, buffers are malloc'ed */
    fw->pool           = ucp_failover_pool_create(
            worker, context->config.ext.multirail.retain_worker);
    ucp_failover_log_init(&fw->log);
    ucp_failover_recover_init(fw);
    for (rsc_index = 0; rsc_index < context->num_tls; ++rsc_index) {
        ucp_failover_rsc_netdev(worker, rsc_index, fw->netdev[rsc_index],
                                IFNAMSIZ);
    }

    worker->failover = fw;

    if (context->config.ext.multirail.link_events) {
        status = ucp_failover_link_watch_start(&worker->async,
                                               ucp_failover_worker_link_cb,
                                               fw, &fw->link);
        if (status != UCS_OK) {
            ucs_warn("worker %p: cannot watch link events (%s), lanes fail "
                     "over on transport errors and probes only", worker,
                     ucs_status_string(status));
            fw->link = NULL;
        }
    }

    status = ucs_dev_event_subscribe(ucp_failover_worker_dev_event_cb, fw);
    if (status != UCS_OK) {
        ucs_warn("worker %p: cannot listen to device events (%s)", worker,
                 ucs_status_string(status));
    }

    status = ucp_failover_probe_start(fw);
    if (status != UCS_OK) {
        ucs_warn("worker %p: cannot start lane probes (%s), silent faults of "
                 "idle lanes are not detected", worker,
                 ucs_status_string(status));
    }

    ucs_debug("worker %p: failover rail monitor %p started%s%s", worker, fw,
              (fw->link != NULL) ? ", watching link events" : "",
              (fw->probe_timer_id >= 0) ? ", probing lanes" : "");
}

static int ucp_failover_worker_cb_filter(const ucs_callbackq_elem_t *elem,
                                         void *arg)
{
    return (elem->cb == ucp_failover_worker_event_progress) &&
           (elem->arg == arg);
}

void ucp_failover_worker_cleanup(ucp_worker_h worker)
{
    ucp_failover_worker_t *fw = worker->failover;
    ucp_failover_ep_t *fo, *tmp;
    ucp_failover_peer_t *peer;

    if (fw == NULL) {
        return;
    }

    if (fw->link != NULL) {
        ucp_failover_link_watch_stop(fw->link);
    }

    ucs_dev_event_unsubscribe(ucp_failover_worker_dev_event_cb, fw);
    ucp_failover_probe_stop(fw);

    /* A handler scheduled but not run yet must not see freed memory */
    ucs_callbackq_remove_if(&worker->uct->progress_q,
                            ucp_failover_worker_cb_filter, fw);
    /* a transport error handler on the async thread must not find it */
    UCS_ASYNC_BLOCK(&worker->async);
    ucp_failover_log_cleanup(worker);
    worker->failover = NULL;
    /* endpoints outlive the monitor: their links to its lists go */
    ucs_list_for_each_safe(fo, tmp, &fw->eps, list) {
        fo->list.next = fo->list.prev = NULL;
        fo->flags    &= ~UCP_FAILOVER_EP_FLAG_ROUND;
        fo->peer      = NULL;
    }
    kh_foreach_value(&fw->peers, peer, {
        ucs_free(peer);
    });
    kh_destroy_inplace(ucp_failover_peer_map, &fw->peers);
    UCS_ASYNC_UNBLOCK(&worker->async);
    ucp_failover_recover_cleanup(fw);
    /* endpoints and buffers that outlive the monitor keep the pool */
    ucp_failover_pool_unref(fw->pool);
    ucs_free(fw);
}

void ucp_failover_iface_params(ucp_worker_h worker,
                               uct_iface_params_t *iface_params)
{
    if (!ucp_failover_is_enabled(worker->context)) {
        return;
    }

    /* Each transport sets its own timeouts from it (TCP_USER_TIMEOUT and the
     * least retransmission timeout, an RC QP's timeout and retry count...),
     * where the user did not, and does not block for longer */
    iface_params->field_mask     |= UCT_IFACE_PARAM_FIELD_FAILURE_TIMEOUT;
    iface_params->failure_timeout = ucs_time_from_sec(
            worker->context->config.ext.multirail.probe_timeout);
}
