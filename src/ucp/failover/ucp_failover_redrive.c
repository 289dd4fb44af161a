/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * Re-driving work that was in flight on a failed lane.
 *
 * Rendezvous data transfer (GET or PUT zcopy) is idempotent until the ATS or
 * ATP is sent: the same bytes land at the same place. So a rendezvous whose
 * data transfer completes with an error on an endpoint that can still fail
 * over is restarted from offset 0 on the current (surviving) lanes, instead
 * of failing the user's request.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucp_failover_int.h"

#include <ucp/core/ucp_ep.h>
#include <ucp/core/ucp_ep.inl>
#include <ucp/core/ucp_request.h>
#include <ucp/core/ucp_request.inl>
#include <ucp/core/ucp_rkey.h>
#include <ucp/core/ucp_worker.h>
#include <ucp/rma/rma.h>
#include <ucs/debug/log.h>


/*
 * A restart normally happens once per request and failed lane. The bound
 * only stops a livelock if an error keeps coming from a lane that never
 * fails over; it is reset by each lane failover.
 */
#define UCP_FAILOVER_MAX_RESTARTS 4096


static int ucp_failover_can_redrive(ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);

    return (fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) &&
           !(ep->flags & UCP_EP_FLAG_FAILED) &&
           (fo->num_restarts < UCP_FAILOVER_MAX_RESTARTS);
}

static unsigned ucp_failover_rndv_restart_progress(void *arg)
{
    ucp_request_t *req = arg;
    ucp_ep_h ep        = req->send.ep;

    if (ep->flags & UCP_EP_FLAG_FAILED) {
        /* every lane is gone: complete the request as without failover */
        ucs_debug("req %p: ep %p failed, rendezvous not restarted", req, ep);
        req->send.state.dt.offset       = req->send.length;
        req->send.state.uct_comp.status = UCS_ERR_CONNECTION_RESET;
        req->send.state.uct_comp.func(&req->send.state.uct_comp);
        return 1;
    }

    ucs_debug("req %p: ep %p restarting rendezvous data transfer of %zu bytes",
              req, ep, req->send.length);
    ucp_request_send(req);
    return 1;
}

int ucp_failover_rndv_restart(ucp_request_t *req)
{
    ucp_ep_h ep                = req->send.ep;
    ucp_failover_ep_t *fo      = ucp_failover_ep(ep);
    uct_worker_cb_id_t prog_id = UCS_CALLBACKQ_ID_NULL;

    if (!ucp_failover_can_redrive(ep)) {
        return 0;
    }

    ucs_assert(req->send.state.uct_comp.count == 0);
    ucs_debug("req %p: ep %p rendezvous data transfer failed (%s), restart "
              "%u", req, ep,
              ucs_status_string(req->send.state.uct_comp.status),
              fo->num_restarts);

    ++fo->num_restarts;
    ++fo->num_redriven;
    req->send.state.dt.offset       = 0;
    req->send.state.uct_comp.status = UCS_OK;
    req->send.lanes_map_avail       = req->send.rndv.lanes_map_all;
    req->send.pending_lane          = UCP_NULL_LANE;

    /* the failed lane may not have failed over yet (the error completion can
     * come before the error handler): send again from the progress thread,
     * by which time the endpoint has its new configuration */
    uct_worker_progress_register_safe(ep->worker->uct,
                                      ucp_failover_rndv_restart_progress, req,
                                      UCS_CALLBACKQ_FLAG_ONESHOT, &prog_id);
    return 1;
}

int ucp_failover_flush_restart(ucp_request_t *req, ucs_callback_t flush_cb)
{
    ucp_ep_h ep = req->send.ep;

    if (!ucp_failover_can_redrive(ep)) {
        return 0;
    }

    /* The flush of a lane that failed over completed with an error. What
     * was in flight on it was re-driven on other lanes (or failed on its
     * own), so flush every current lane again: a lane that failed over is
     * skipped, the others complete once their operations did */
    ucs_debug("req %p: ep %p flush hit a failed lane (%s), flushing again",
              req, ep, ucs_status_string(req->send.state.uct_comp.status));
    ++ucp_failover_ep(ep)->num_restarts;
    req->status                     = UCS_OK;
    req->send.lane                  = UCP_NULL_LANE;
    req->send.flush.sw_started      = 0;
    req->send.flush.sw_done         = 0;
    req->send.flush.started_lanes   = 0;
    req->send.flush.num_lanes       = ucp_ep_num_lanes(ep);
    req->send.state.uct_comp.count  = ucp_ep_num_lanes(ep);
    req->send.state.uct_comp.status = UCS_OK;
    uct_worker_progress_register_safe(ep->worker->uct, flush_cb, req, 0,
                                      &req->send.flush.prog_id);
    return 1;
}

/*
 * RMA and AMO requests take their lane from the rkey's cache, resolved for
 * one endpoint configuration; after a failover, resolve it again for the
 * current one. Returns whether the request is such a request.
 */
static int ucp_failover_reroute_rkey_req(ucp_request_t *req)
{
    ucp_ep_h ep = req->send.ep;
    const ucp_rma_proto_t *rma;
    const ucp_amo_proto_t *amo;
    ucp_rkey_h rkey;
    int i, is_put, is_fetch;

    for (i = UCP_RKEY_BASIC_PROTO; i <= UCP_RKEY_SW_PROTO; ++i) {
        rma = UCP_RKEY_RMA_PROTO(i);
        amo = UCP_RKEY_AMO_PROTO(i);
        if ((req->send.uct.func == rma->progress_put) ||
            (req->send.uct.func == rma->progress_get)) {
            is_put = (req->send.uct.func == rma->progress_put);
            rkey   = req->send.rma.rkey;
            ucp_rkey_resolve_inner(rkey, ep);
            rma                = UCP_RKEY_RMA_PROTO(rkey->cache.rma_proto_index);
            req->send.lane     = rkey->cache.rma_lane;
            req->send.uct.func = is_put ? rma->progress_put :
                                          rma->progress_get;
            return 1;
        }

        if ((req->send.uct.func == amo->progress_fetch) ||
            (req->send.uct.func == amo->progress_post)) {
            is_fetch = (req->send.uct.func == amo->progress_fetch);
            rkey     = req->send.amo.rkey;
            ucp_rkey_resolve_inner(rkey, ep);
            amo                = UCP_RKEY_AMO_PROTO(rkey->cache.amo_proto_index);
            req->send.lane     = rkey->cache.amo_lane;
            req->send.uct.func = is_fetch ? amo->progress_fetch :
                                            amo->progress_post;
            return 1;
        }
    }

    return 0;
}

void ucp_failover_reroute(ucp_request_t *req)
{
    ucp_ep_h ep = req->send.ep;

    req->send.pending_lane = UCP_NULL_LANE;
    if (ucp_failover_reroute_rkey_req(req)) {
        ucs_debug("req %p: RMA/AMO request moved to lane[%d]", req,
                  req->send.lane);
    } else if ((req->send.uct.func == ucp_ep_flush_progress_pending) &&
               ucp_failover_lane_is_failed(ep, req->send.lane)) {
        /* A flush waiting to flush the failed lane: that lane's work moved
         * to the other lanes, which the flush flushes on their own; its
         * completion slot is taken by a flush of the am lane instead */
        ucs_debug("req %p: flush of failed lane[%d] done on lane[%d]", req,
                  req->send.lane, ucp_ep_get_am_lane(ep));
        req->send.lane = ucp_ep_get_am_lane(ep);
    }
}
