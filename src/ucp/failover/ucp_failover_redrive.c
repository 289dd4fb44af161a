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
 * over sends the fragments that did not complete again, on the current
 * (surviving) lanes, instead of failing the user's request.
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
#include <ucp/rma/rma.inl>
#include <ucp/rndv/rndv.h>
#include <ucs/datastruct/array.inl>
#include <ucs/debug/log.h>


/*
 * A restart normally happens once per request and failed lane, and an
 * endpoint can have many requests in flight when a lane fails. The bound
 * only stops a livelock if an error keeps coming from a lane that never
 * fails over (each restart is one progress call); it is reset by each lane
 * failover.
 */
#define UCP_FAILOVER_MAX_RESTARTS (1u << 20)


static int ucp_failover_can_redrive(ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);

    return (fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) &&
           !(ep->flags & UCP_EP_FLAG_FAILED) &&
           (fo->num_restarts < UCP_FAILOVER_MAX_RESTARTS);
}

/*
 * Rendezvous zero-copy fragments
 *
 * On a failover endpoint each GET/PUT zcopy fragment of a rendezvous that
 * can restart has a completion of its own, which knows the fragment's range.
 * A fragment that completes with an error (its lane failed; completing with
 * success means the data landed) adds its range to the request's "lost"
 * ranges, and so does the rest of the request when posting a fragment fails
 * at once (UCP then skips what was not posted). When every fragment has
 * completed, the restart sends the lost ranges again, on the lanes of the
 * endpoint's configuration then: the share of the surviving lanes is not
 * sent twice.
 *
 * The ranges being sent again ("resend") are walked by the rendezvous
 * progress through two hooks: one clips a fragment to the current range, the
 * other moves to the next range once a range is posted. Ranges lost while
 * sending again collect apart and are sent again by the next restart.
 */

/* The request's ranges are unknown (no memory to track them): restart all */
#define UCP_FAILOVER_REDO_ALL     ((ucp_failover_rndv_redo_t*)0x1)
/* The restart could not be done: complete with the error */
#define UCP_FAILOVER_REDO_GIVE_UP ((ucp_failover_rndv_redo_t*)0x2)

#define UCP_FAILOVER_REDO_IS_STATE(_redo) ((uintptr_t)(_redo) > 0x2)


typedef struct {
    size_t start;
    size_t end;
} ucp_failover_range_t;


/* Sorted, disjoint ranges of a request */
UCS_ARRAY_DEFINE_INLINE(ucp_failover_ranges, unsigned, ucp_failover_range_t);


struct ucp_failover_rndv_redo {
    ucs_array_t(ucp_failover_ranges) lost;   /* failed since the last
                                                restart */
    ucs_array_t(ucp_failover_ranges) resend; /* being sent again, from
                                                resend_next */
    unsigned                         resend_next;
    unsigned                         proto;  /* UCP_REQUEST_SEND_PROTO_RNDV_
                                                GET/PUT */
    uct_worker_cb_id_t               prog_id; /* the restart's one-shot
                                                 progress callback, while it
                                                 is queued */
};


/* A fragment in flight, from the worker's buffers (no malloc per
 * fragment) */
typedef struct {
    uct_completion_t comp;
    ucp_request_t    *req;
    size_t           offset;
    size_t           length;
    size_t           held;   /* of its buffer */
} ucp_failover_rndv_frag_t;


/* Add [start, end) to sorted, disjoint ranges, merging neighbours */
static ucs_status_t
ucp_failover_ranges_add(ucs_array_t(ucp_failover_ranges) *ranges, size_t start,
                        size_t end)
{
    unsigned count = ucs_array_length(ranges);
    ucp_failover_range_t *r;
    ucs_status_t status;
    unsigned i, j;

    ucs_assert(start < end);
    for (i = 0; (i < count) && (ucs_array_elem(ranges, i).end < start); ++i) {
    }

    r = ucs_array_begin(ranges);
    if ((i < count) && (r[i].start <= end)) {
        /* overlaps or touches r[i] (and maybe the ones after it) */
        r[i].start = ucs_min(r[i].start, start);
        r[i].end   = ucs_max(r[i].end, end);
        for (j = i + 1; (j < count) && (r[j].start <= r[i].end); ++j) {
            r[i].end = ucs_max(r[i].end, r[j].end);
        }
        memmove(&r[i + 1], &r[j], (count - j) * sizeof(*r));
        ucs_array_set_length(ranges, count - (j - (i + 1)));
        return UCS_OK;
    }

    status = ucs_array_append(ucp_failover_ranges, ranges);
    if (status != UCS_OK) {
        return status;
    }

    r = ucs_array_begin(ranges);
    memmove(&r[i + 1], &r[i], (count - i) * sizeof(*r));
    r[i].start = start;
    r[i].end   = end;
    return UCS_OK;
}

static size_t
ucp_failover_ranges_bytes(const ucs_array_t(ucp_failover_ranges) *ranges)
{
    const ucp_failover_range_t *r;
    size_t bytes = 0;

    ucs_array_for_each(r, ranges) {
        bytes += r->end - r->start;
    }
    return bytes;
}

static void ucp_failover_rndv_redo_release(ucp_request_t *req)
{
    ucp_failover_rndv_redo_t *redo = req->send.rndv.fo_redo;

    if (UCP_FAILOVER_REDO_IS_STATE(redo)) {
        ucs_array_cleanup_dynamic(&redo->lost);
        ucs_array_cleanup_dynamic(&redo->resend);
        ucs_free(redo);
    }
    req->send.rndv.fo_redo = NULL;
}

/* Whether the request has ranges being sent again */
static UCS_F_ALWAYS_INLINE ucp_failover_range_t *
ucp_failover_rndv_resend_range(ucp_request_t *req)
{
    ucp_failover_rndv_redo_t *redo = req->send.rndv.fo_redo;

    if (!UCP_FAILOVER_REDO_IS_STATE(redo) ||
        (redo->resend_next >= ucs_array_length(&redo->resend))) {
        return NULL;
    }
    return &ucs_array_elem(&redo->resend, redo->resend_next);
}

/* [start, end) of the request must be sent again */
static void ucp_failover_rndv_lost(ucp_request_t *req, size_t start,
                                   size_t end)
{
    ucp_failover_rndv_redo_t *redo = req->send.rndv.fo_redo;

    if (((redo != NULL) && !UCP_FAILOVER_REDO_IS_STATE(redo)) ||
        (start >= end)) {
        return; /* all of it is sent again, or none */
    }

    ucs_trace_req("req %p: rendezvous range %zu..%zu lost", req, start, end);
    if (redo == NULL) {
        redo = ucs_calloc(1, sizeof(*redo), "failover rndv redo");
        if (redo == NULL) {
            goto all;
        }
        redo->prog_id          = UCS_CALLBACKQ_ID_NULL;
        req->send.rndv.fo_redo = redo;
    }

    if (ucp_failover_ranges_add(&redo->lost, start, end) == UCS_OK) {
        return;
    }

all:
    ucs_debug("req %p: no memory to track rendezvous ranges, the restart "
              "sends all", req);
    ucp_failover_rndv_redo_release(req);
    req->send.rndv.fo_redo = UCP_FAILOVER_REDO_ALL;
}

static void ucp_failover_rndv_frag_completed(uct_completion_t *self)
{
    ucp_failover_rndv_frag_t *frag = ucs_container_of(self,
                                                      ucp_failover_rndv_frag_t,
                                                      comp);
    ucp_request_t *req             = frag->req;
    ucs_status_t status            = self->status;

    if (status != UCS_OK) {
        ucp_failover_rndv_lost(req, frag->offset,
                               frag->offset + frag->length);
    }
    ucp_failover_pool_put(frag, frag->held);
    ucp_invoke_uct_completion(&req->send.state.uct_comp, status);
}

uct_completion_t *ucp_failover_rndv_frag_comp(ucp_request_t *req,
                                              size_t offset, size_t length)
{
    ucp_failover_worker_t *fw = req->send.ep->worker->failover;
    ucp_failover_rndv_frag_t *frag;
    size_t held;

    /* failover is negotiated at wireup, before any data flows on the lanes:
     * a restartable rendezvous has all or none of its fragments tracked */
    if (!(ucp_failover_ep(req->send.ep)->flags &
          UCP_FAILOVER_EP_FLAG_NEGOTIATED) ||
        (req->send.rndv.fo_redo == UCP_FAILOVER_REDO_ALL)) {
        return &req->send.state.uct_comp;
    }

    frag = ucp_failover_pool_get((fw == NULL) ? NULL : fw->pool, sizeof(*frag),
                                 &held);
    if (frag == NULL) {
        ucp_failover_rndv_redo_release(req);
        req->send.rndv.fo_redo = UCP_FAILOVER_REDO_ALL;
        return &req->send.state.uct_comp;
    }

    frag->comp.func   = ucp_failover_rndv_frag_completed;
    frag->comp.count  = 1;
    frag->comp.status = UCS_OK;
    frag->req         = req;
    frag->offset      = offset;
    frag->length      = length;
    frag->held        = held;
    return &frag->comp;
}

void ucp_failover_rndv_frag_posted(ucp_request_t *req, uct_completion_t *comp,
                                   ucs_status_t status)
{
    ucp_failover_rndv_frag_t *frag;
    ucp_failover_range_t *range;

    if ((comp == &req->send.state.uct_comp) || (status == UCS_INPROGRESS)) {
        return;
    }

    frag = ucs_container_of(comp, ucp_failover_rndv_frag_t, comp);
    if (UCS_STATUS_IS_ERR(status) && (status != UCS_ERR_NO_RESOURCE)) {
        /* UCP skips the rest of the request: all of it is lost; of ranges
         * being sent again, the restart takes what is left of them */
        range = ucp_failover_rndv_resend_range(req);
        if (range == NULL) {
            ucp_failover_rndv_lost(req, frag->offset, req->send.length);
        } else {
            range->start = frag->offset;
        }
    }
    ucp_failover_pool_put(frag, frag->held);
}

size_t ucp_failover_rndv_frag_clip(ucp_request_t *req, size_t length)
{
    ucp_failover_range_t *range = ucp_failover_rndv_resend_range(req);
    size_t offset               = req->send.state.dt.offset;

    if (range == NULL) {
        return length;
    }

    ucs_assertv((offset >= range->start) && (offset < range->end),
                "req %p offset %zu range %zu..%zu", req, offset, range->start,
                range->end);
    return ucs_min(length, range->end - offset);
}

void ucp_failover_rndv_frag_next(ucp_request_t *req)
{
    ucp_failover_range_t *range = ucp_failover_rndv_resend_range(req);
    ucp_failover_rndv_redo_t *redo;

    if ((range == NULL) || (req->send.state.dt.offset < range->end)) {
        return;
    }

    redo = req->send.rndv.fo_redo;
    if (++redo->resend_next < ucs_array_length(&redo->resend)) {
        req->send.state.dt.offset =
                ucs_array_elem(&redo->resend, redo->resend_next).start;
        return;
    }

    /* all sent again */
    req->send.state.dt.offset = req->send.length;
    ucs_array_set_length(&redo->resend, 0);
    redo->resend_next = 0;
    if (ucs_array_is_empty(&redo->lost)) {
        ucp_failover_rndv_redo_release(req);
    }
}

/*
 * Take the request's lanes again from the endpoint's current configuration,
 * as UCP chose them for a new request: a position of the rendezvous lane
 * list whose lane failed now names a surviving lane, which may need another
 * of the remote key's transport keys (another memory domain). UCP's lane
 * choice resets the ranges to send again, which are kept.
 */
static void ucp_failover_rndv_take_lanes(ucp_request_t *req, unsigned proto)
{
    ucp_failover_rndv_redo_t *redo = req->send.rndv.fo_redo;

    ucp_rndv_req_init_zcopy_lane_map(req, req->send.mem_type,
                                     req->send.length, proto);
    req->send.rndv.fo_redo = redo;
}

void ucp_failover_rndv_relane(ucp_request_t *req, unsigned proto)
{
    ucp_lane_map_t lanes_map_all = req->send.rndv.lanes_map_all;

    if (!(ucp_failover_ep(req->send.ep)->flags &
          UCP_FAILOVER_EP_FLAG_NEGOTIATED)) {
        req->send.rndv.fo_cfg_index = req->send.ep->cfg_index;
        return;
    }

    /* no lane left cannot happen: the last rendezvous lane does not fail
     * over (ucp_failover_lane_can_fail()); an empty map stops the request
     * with UCP's own "no lane" error rather than post on stale lanes */
    ucp_failover_rndv_take_lanes(req, proto);
    ucs_debug("req %p: rendezvous lanes map 0x%x -> 0x%x", req, lanes_map_all,
              req->send.rndv.lanes_map_all);
}

static unsigned ucp_failover_rndv_restart_progress(void *arg)
{
    ucp_request_t *req             = arg;
    ucp_ep_h ep                    = req->send.ep;
    ucp_failover_rndv_redo_t *redo = req->send.rndv.fo_redo;
    ucs_status_t status;

    ucs_assert(UCP_FAILOVER_REDO_IS_STATE(redo));
    redo->prog_id = UCS_CALLBACKQ_ID_NULL; /* one-shot: no longer queued */
    if (ep->flags & UCP_EP_FLAG_FAILED) {
        /* every lane is gone: complete the request as without failover */
        ucs_debug("req %p: ep %p failed, rendezvous not restarted", req, ep);
        status = UCS_ERR_CONNECTION_RESET;
        goto err;
    }

    ucp_failover_rndv_take_lanes(req, redo->proto);
    if (req->send.rndv.lanes_map_all == 0) {
        ucs_diag("req %p: ep %p has no lane left for the rendezvous data "
                 "transfer", req, ep);
        status = UCS_ERR_UNREACHABLE;
        goto err;
    }

    ucs_debug("req %p: ep %p sending %zu of %zu rendezvous bytes again on "
              "lanes map 0x%x", req, ep,
              ucp_failover_ranges_bytes(&redo->resend), req->send.length,
              req->send.rndv.lanes_map_all);
    ucp_request_send(req);
    return 1;

err:
    ucp_failover_rndv_redo_release(req);
    req->send.rndv.fo_redo          = UCP_FAILOVER_REDO_GIVE_UP;
    req->send.state.dt.offset       = req->send.length;
    req->send.state.uct_comp.status = status;
    req->send.state.uct_comp.func(&req->send.state.uct_comp);
    return 1;
}

int ucp_failover_rndv_restart(ucp_request_t *req, unsigned proto)
{
    ucp_ep_h ep                    = req->send.ep;
    ucp_failover_ep_t *fo          = ucp_failover_ep(ep);
    ucp_failover_rndv_redo_t *redo = req->send.rndv.fo_redo;
    ucs_array_t(ucp_failover_ranges) ranges;
    ucp_failover_range_t *range;
    unsigned i;

    if ((redo == UCP_FAILOVER_REDO_GIVE_UP) || !ucp_failover_can_redrive(ep)) {
        goto no_restart;
    }

    ucs_assert(req->send.state.uct_comp.count == 0);
    if (UCP_FAILOVER_REDO_IS_STATE(redo)) {
        /* what is left of the ranges being sent again (the request was cut
         * short while sending them) is lost as well */
        for (i = redo->resend_next; i < ucs_array_length(&redo->resend);
             ++i) {
            range = &ucs_array_elem(&redo->resend, i);
            if ((range->start < range->end) &&
                (ucp_failover_ranges_add(&redo->lost, range->start,
                                         range->end) != UCS_OK)) {
                ucp_failover_rndv_redo_release(req);
                req->send.rndv.fo_redo = redo = UCP_FAILOVER_REDO_ALL;
                break;
            }
        }
    }

    if (!UCP_FAILOVER_REDO_IS_STATE(redo) ||
        ucs_array_is_empty(&redo->lost) ||
        !UCP_DT_IS_CONTIG(req->send.datatype)) {
        /* which ranges were lost is not known: all of them */
        ucp_failover_rndv_redo_release(req);
        ucp_failover_rndv_lost(req, 0, req->send.length);
        redo = req->send.rndv.fo_redo;
        if (!UCP_FAILOVER_REDO_IS_STATE(redo)) {
            goto no_restart;
        }
    }

    /* lost -> resend */
    ranges            = redo->resend;
    redo->resend      = redo->lost;
    redo->lost        = ranges;
    redo->resend_next = 0;
    redo->proto       = proto;
    ucs_array_set_length(&redo->lost, 0);

    ucs_debug("req %p: ep %p rendezvous data transfer failed (%s), restart "
              "%u: %u range(s), %zu of %zu bytes",
              req, ep, ucs_status_string(req->send.state.uct_comp.status),
              fo->num_restarts, ucs_array_length(&redo->resend),
              ucp_failover_ranges_bytes(&redo->resend), req->send.length);

    ++fo->num_restarts;
    ++fo->num_redriven;
    fo->redriven_bytes             += ucp_failover_ranges_bytes(&redo->resend);
    req->send.state.dt.offset       = ucs_array_elem(&redo->resend, 0).start;
    req->send.state.uct_comp.status = UCS_OK;
    req->send.pending_lane          = UCP_NULL_LANE;

    /* the failed lane may not have failed over yet (the error completion can
     * come before the error handler): send again from the progress thread,
     * by which time the endpoint has its new configuration. If the request
     * is purged first (its endpoint failed as a whole),
     * ucp_failover_req_purge() takes the callback back */
    ucs_assert(redo->prog_id == UCS_CALLBACKQ_ID_NULL);
    uct_worker_progress_register_safe(ep->worker->uct,
                                      ucp_failover_rndv_restart_progress, req,
                                      UCS_CALLBACKQ_FLAG_ONESHOT,
                                      &redo->prog_id);
    return 1;

no_restart:
    ucp_failover_rndv_redo_release(req);
    return 0;
}

void ucp_failover_req_purge(ucp_request_t *req)
{
    ucp_failover_rndv_redo_t *redo;

    /* only a rendezvous send doing PUT zcopy keeps its request id (and so
     * is purged) while it may restart; receives doing GET are not tracked */
    if (req->send.uct.func != ucp_rndv_progress_rma_put_zcopy) {
        return;
    }

    redo = req->send.rndv.fo_redo;
    if (!UCP_FAILOVER_REDO_IS_STATE(redo)) {
        return;
    }

    if (redo->prog_id != UCS_CALLBACKQ_ID_NULL) {
        ucs_debug("req %p: purged with its rendezvous restart queued, restart "
                  "cancelled", req);
        uct_worker_progress_unregister_safe(req->send.ep->worker->uct,
                                            &redo->prog_id);
    }
    ucp_failover_rndv_redo_release(req);
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

static int ucp_failover_reroute_rkey_req(ucp_request_t *req);

/*
 * RMA put and get on a transport's own RMA (RC: RDMA write and read)
 *
 * When the lane fails under such a request, its fragments in flight complete
 * with an error (the lane's operations are cancelled). The whole request is
 * sent again on the endpoint's current lanes: put and get are idempotent, the
 * same bytes land at the same place (a fragment that did land is written or
 * read again). Only the basic (offloaded) protocol: the software one runs on
 * the sequenced am lane, whose messages are sent again by the sequencing.
 */
static int ucp_failover_rma_is_basic(const ucp_request_t *req)
{
    const ucp_rma_proto_t *rma = UCP_RKEY_RMA_PROTO(UCP_RKEY_BASIC_PROTO);

    return (req->send.uct.func == rma->progress_put) ||
           (req->send.uct.func == rma->progress_get);
}

static void ucp_failover_put_held_completion(uct_completion_t *self);

/* The completion of a request that a move registered for zero-copy: as
 * UCP's zero-copy RMA completion (it deregisters the buffer), for a request
 * started without a registration, whose completion would not */
static void ucp_failover_rma_moved_completion(uct_completion_t *self)
{
    ucp_request_t *req = ucs_container_of(self, ucp_request_t,
                                          send.state.uct_comp);

    if (req->send.length != req->send.state.dt.offset) {
        return;
    }

    if ((self->status != UCS_OK) && ucp_failover_rma_restart(req)) {
        return; /* sent again: still the request's */
    }

    ucp_send_request_id_release(req);
    ucp_request_send_buffer_dereg(req);
    ucp_request_complete_send(req, self->status);
}

/* Whether the basic protocol puts @a length bytes on @a lane with zero
 * copy (the conditions of ucp_rma_basic_progress_put) */
static int ucp_failover_rma_put_is_zcopy(ucp_ep_h ep, ucp_lane_index_t lane,
                                         size_t length)
{
    const ucp_ep_rma_config_t *cfg = &ucp_ep_config(ep)->rma[lane];

    return ((ssize_t)length > cfg->max_put_short) &&
           (length > ucp_ep_config(ep)->bcopy_thresh) &&
           (length >= cfg->put_zcopy_thresh);
}

/* Whether the basic protocol sends (the first fragment of) what is left of
 * @a req on its lane with zero copy, which needs a memory handle of the
 * lane's domain (the conditions of ucp_rma_basic_progress_put/get) */
static int ucp_failover_rma_is_zcopy(ucp_request_t *req)
{
    ucp_ep_h ep   = req->send.ep;
    size_t length = req->send.length;

    if (!(ucp_ep_md_attr(ep, req->send.lane)->cap.flags &
          UCT_MD_FLAG_NEED_MEMH)) {
        return 0;
    }

    if (req->send.uct.func ==
        UCP_RKEY_RMA_PROTO(UCP_RKEY_BASIC_PROTO)->progress_put) {
        return ucp_failover_rma_put_is_zcopy(ep, req->send.lane, length);
    }

    return (ssize_t)length >=
           ucp_ep_config(ep)->rma[req->send.lane].get_zcopy_thresh;
}

/*
 * An RMA request that moves to a lane (a failover, a lane back, its rkey
 * resolved again) takes a registration of its buffer for that lane's memory
 * domain when the basic protocol will send it there with zero copy (the
 * protocol posts the handle of its lane's domain, patch 0061). What it had
 * stays registered: a fragment posted on the old lane may still read it.
 * A request that had no registration (it started on the software protocol,
 * or below the zero-copy threshold of its first lane) gets one, and a
 * completion that releases it. Without this, the request posted the failed
 * device's key, or a stale handle left in the request by its previous use
 * ("local protection error" on RC, or on soft-RoCE a send queue that
 * stops). The registration covers what is left of the request; a request
 * sent again whole gives it back first (ucp_failover_rma_rewind).
 */
static ucs_status_t ucp_failover_rma_buffer_move(ucp_request_t *req)
{
    ucp_md_map_t md_map = req->send.state.dt.dt.contig.md_map;
    ucs_status_t status;

    if (!ucp_failover_rma_is_basic(req) || !ucp_failover_rma_is_zcopy(req) ||
        (md_map & UCS_BIT(ucp_ep_md_index(req->send.ep, req->send.lane)))) {
        return UCS_OK;
    }

    /* UCP's own "add a lane to the registration" (keeps md_map) */
    status = ucp_send_request_add_reg_lane(req, req->send.lane);
    if ((status == UCS_OK) && (md_map == 0) &&
        (req->send.state.uct_comp.func != ucp_failover_put_held_completion)) {
        /* a held put's completion releases the registration itself */
        req->send.state.uct_comp.func = ucp_failover_rma_moved_completion;
    }

    return status;
}

/* A progress function that is not the basic protocol's: a request given it
 * is not offered for a restart again (ucp_failover_rma_restart) */
static ucs_status_t ucp_failover_rma_failed_progress(uct_pending_req_t *self)
{
    return UCS_OK;
}

/*
 * Complete an RMA request that cannot be sent on, with @a status, as its
 * completion would have (the length is all posted; what is in flight
 * completes first). It is no longer offered for a restart, which would
 * fail the same way.
 */
static void ucp_failover_rma_fail(ucp_request_t *req, ucs_status_t status)
{
    ucs_debug("req %p: ep %p RMA request cannot be sent again: %s", req,
              req->send.ep, ucs_status_string(status));
    req->send.uct.func = ucp_failover_rma_failed_progress;
    req->send.length   = 0;
    uct_completion_update_status(&req->send.state.uct_comp, status);
    ucp_send_request_invoke_uct_completion(req);
}

ucs_status_t ucp_failover_rma_zcopy_reg(ucp_request_t *req)
{
    ucs_status_t status;

    /* a request waiting on a lane that stays, whose rkey another request
     * resolved again for the new configuration (its progress does not see
     * the change), or one whose move could not register */
    status = ucp_failover_rma_buffer_move(req);
    if (status != UCS_OK) {
        ucp_failover_rma_fail(req, status);
        return status;
    }

    ucs_debug("req %p: ep %p RMA request registered for lane[%d]", req,
              req->send.ep, req->send.lane);
    return UCS_OK;
}

/* Move an RMA or AMO request to the lane its rkey resolves to for the
 * endpoint's current configuration, its zero-copy buffer with it */
static ucs_status_t ucp_failover_rkey_req_move(ucp_request_t *req)
{
    ucp_failover_reroute_rkey_req(req);
    if (req->send.lane == UCP_NULL_LANE) {
        return UCS_ERR_UNREACHABLE;
    }

    return ucp_failover_rma_buffer_move(req);
}

/*
 * Called by a basic RMA/AMO progress function whose rkey's cache is not for
 * the endpoint's configuration or the request's lane. The request may run
 * from the pending queue of its old lane: if its new lane has no room, it
 * waits on the new lane's queue instead (as UCP's multi-fragment protocols
 * switch queues), for the old lane's may have room, and RC asserts that a
 * request it dispatches declines only without.
 */
ucs_status_t ucp_failover_rkey_req_refresh(ucp_request_t *req)
{
    ucs_status_t status;

    status = ucp_failover_rkey_req_move(req);
    if (status != UCS_OK) {
        /* (an error returned from a progress function is fatal to UCP) */
        ucp_failover_rma_fail(req, status);
        return UCS_OK;
    }

    ucs_debug("req %p: ep %p configuration changed under an RMA/AMO request, "
              "it goes on lane[%d]", req, req->send.ep, req->send.lane);
    for (;;) {
        status = req->send.uct.func(&req->send.uct);
        if ((status != UCS_ERR_NO_RESOURCE) ||
            (req->send.lane == req->send.pending_lane)) {
            return status;
        }

        if (ucp_request_pending_add(req)) {
            return UCS_OK;
        }
        /* the new lane has room again: try again */
    }
}

/*
 * RMA put (short and bcopy) on a failover endpoint
 *
 * A short or bcopy put completes as soon as it is posted (the user's buffer
 * was copied into the send queue), before the peer has it: when its lane
 * fails, the put dies with the lane's QP and no completion says so; the
 * application's next flush would then complete without it (a get after it
 * read stale data in the RoCE soak). On an endpoint that negotiated
 * failover such a put completes when its lane has acknowledged it: after
 * the last fragment is posted, the request flushes the lane with its own
 * completion, and counts as a remote operation in flight (the endpoint's
 * flush state, as UCP's software RMA does), so that an endpoint or worker
 * flush waits for it. A flush that completes with an error (the lane failed)
 * sends the put again, whole, on the current lanes (ucp_failover_rma_restart,
 * as an RDMA write in flight): the user's buffer is still the request's.
 */
static void ucp_failover_put_held_completion(uct_completion_t *self)
{
    ucp_request_t *req = ucs_container_of(self, ucp_request_t,
                                          send.state.uct_comp);
    ucp_ep_h ep        = req->send.ep;

    if (ucs_unlikely(self->status != UCS_OK) &&
        ucp_failover_rma_restart(req)) {
        return; /* sent again: still held */
    }

    ucp_ep_rma_remote_request_completed(ep);
    ucp_send_request_id_release(req);
    if (ucs_unlikely(req->send.state.dt.dt.contig.md_map != 0)) {
        /* moved to a zero-copy lane after it was held: registered there
         * (ucp_failover_rma_buffer_move) */
        ucp_request_send_buffer_dereg(req);
    }

    ucp_request_complete_send(req, self->status);
}

static ucs_status_t ucp_failover_put_flush_progress(uct_pending_req_t *self)
{
    ucp_request_t *req = ucs_container_of(self, ucp_request_t, send.uct);
    ucp_ep_h ep        = req->send.ep;
    ucs_status_t status;

    /* the request's progress is the put's again, should it be sent again */
    req->send.uct.func = UCP_RKEY_RMA_PROTO(UCP_RKEY_BASIC_PROTO)->progress_put;

    ++req->send.state.uct_comp.count;
    status = uct_ep_flush(ep->uct_eps[req->send.lane], 0,
                          &req->send.state.uct_comp);
    if (status == UCS_INPROGRESS) {
        return UCS_OK; /* the flush's completion completes the put */
    }

    --req->send.state.uct_comp.count;
    if (status == UCS_ERR_NO_RESOURCE) {
        /* waits on the lane's pending queue for the flush */
        req->send.uct.func = ucp_failover_put_flush_progress;
        return UCS_ERR_NO_RESOURCE;
    }

    /* flushed already (UCS_OK), or the lane's endpoint failed */
    uct_completion_update_status(&req->send.state.uct_comp, status);
    ucp_send_request_invoke_uct_completion(req);
    return UCS_OK;
}

/* The length of the last fragment of a basic put posted whole: the
 * protocol does not move the buffer past it */
static size_t ucp_failover_rma_last_length(ucp_request_t *req)
{
    return req->send.rma.fo_length -
           UCS_PTR_BYTE_DIFF(req->send.rma.fo_buffer, req->send.buffer);
}

ucs_status_t ucp_failover_rma_posted(ucp_request_t *req)
{
    ucp_ep_h ep = req->send.ep;

    /* only a basic put whose last fragment has no transport completion of
     * its own: a get, or a put that ended with a zero-copy fragment in
     * flight, completes with it (RC completes in order, TCP acknowledges a
     * zero-copy put). A put larger than the lane's zero-copy size whose tail
     * went out as short or bcopy behind its zero-copy fragments is held as
     * well: the fragments' completions do not cover the tail. (Whether the
     * buffer is registered says nothing: a put moved between lanes may be
     * registered and still have gone out as bcopy.) */
    if ((req->send.uct.func !=
         UCP_RKEY_RMA_PROTO(UCP_RKEY_BASIC_PROTO)->progress_put) ||
        ((req->send.state.uct_comp.count != 0) &&
         ucp_failover_rma_put_is_zcopy(ep, req->send.lane,
                                       ucp_failover_rma_last_length(req)))) {
        ucp_send_request_invoke_uct_completion(req);
        return UCS_OK;
    }

    if (req->send.state.uct_comp.func != ucp_failover_put_held_completion) {
        /* held for the first time (not sent again) */
        req->send.state.uct_comp.func = ucp_failover_put_held_completion;
        ucp_worker_flush_ops_count_inc(ep->worker);
        ucp_ep_rma_remote_request_sent(ep);
    }

    return ucp_failover_put_flush_progress(&req->send.uct);
}

/* Rewind a basic RMA request to send it again, whole. Nothing of it is in
 * flight: a registration of what was left of it is given back (its next
 * move registers the whole buffer) */
static void ucp_failover_rma_rewind(ucp_request_t *req)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(req->send.ep);

    if (req->send.state.dt.dt.contig.md_map != 0) {
        ucp_request_send_buffer_dereg(req);
    }

    ++fo->num_redriven;
    fo->redriven_bytes += req->send.rma.fo_length;

    req->send.buffer                = req->send.rma.fo_buffer;
    req->send.length                = req->send.rma.fo_length;
    req->send.rma.remote_addr       = req->send.rma.fo_remote_addr;
    req->send.state.dt.offset       = 0;
    req->send.state.uct_comp.count  = 0;
    req->send.state.uct_comp.status = UCS_OK;
    req->send.pending_lane          = UCP_NULL_LANE;
}

/* A held put waiting on a failed lane's pending queue to flush it: what it
 * posted there is lost with the lane, so it is sent again, whole. (One with
 * zero-copy fragments in flight waits for them instead, on a failed lane:
 * ucp_failover_rma_park; on a lane that stays, it flushes that lane) */
static int ucp_failover_put_flush_reroute(ucp_request_t *req)
{
    if ((req->send.uct.func != ucp_failover_put_flush_progress) ||
        (req->send.state.uct_comp.count != 0)) {
        return 0;
    }

    req->send.uct.func = UCP_RKEY_RMA_PROTO(UCP_RKEY_BASIC_PROTO)->progress_put;
    ucp_failover_rma_rewind(req);
    return 1;
}

/* A put waiting on a failed lane's pending queue for its next fragment, that
 * posted fragments there without a completion of their own (short, bcopy):
 * they may be lost with the lane, and the put's flush after its last
 * fragment would cover only its new lane, so it is sent again, whole. (With
 * a zero-copy fragment in flight its error completion restarts the put.) */
static int ucp_failover_put_partial_reroute(ucp_request_t *req)
{
    if ((req->send.uct.func !=
         UCP_RKEY_RMA_PROTO(UCP_RKEY_BASIC_PROTO)->progress_put) ||
        (req->send.buffer == req->send.rma.fo_buffer) ||
        (req->send.state.uct_comp.count != 0)) {
        return 0;
    }

    ucp_failover_rma_rewind(req);
    return 1;
}

static unsigned ucp_failover_rma_restart_progress(void *arg)
{
    ucp_request_t *req = arg;
    ucp_ep_h ep        = req->send.ep;
    ucs_status_t status;

    if (ep->flags & UCP_EP_FLAG_FAILED) {
        /* every lane is gone: complete as without failover */
        status = UCS_ERR_CONNECTION_RESET;
        goto err;
    }

    /* a zero-copy buffer was registered for the failed lane's memory
     * domain: now for the new lane's, if it differs */
    status = ucp_failover_rkey_req_move(req);
    if (status != UCS_OK) {
        goto err;
    }

    ucs_debug("req %p: ep %p RMA %s of %zu bytes sent again on lane[%d]", req,
              ep, (req->send.uct.func ==
                   UCP_RKEY_RMA_PROTO(UCP_RKEY_BASIC_PROTO)->progress_put) ?
              "put" : "get", req->send.length, req->send.lane);
    ucp_request_send(req);
    return 1;

err:
    ucp_failover_rma_fail(req, status);
    return 1;
}

int ucp_failover_rma_restart(ucp_request_t *req)
{
    ucp_ep_h ep                = req->send.ep;
    uct_worker_cb_id_t prog_id = UCS_CALLBACKQ_ID_NULL;
    ucp_failover_ep_t *fo      = ucp_failover_ep(ep);

    if (!ucp_failover_can_redrive(ep) || !ucp_failover_rma_is_basic(req)) {
        return 0;
    }

    ucs_debug("req %p: ep %p RMA failed (%s), sending it again", req, ep,
              ucs_status_string(req->send.state.uct_comp.status));
    ++fo->num_restarts;
    ucp_failover_rma_rewind(req);

    /* from progress, as a rendezvous restart: the endpoint may not have its
     * new configuration yet */
    uct_worker_progress_register_safe(ep->worker->uct,
                                      ucp_failover_rma_restart_progress, req,
                                      UCS_CALLBACKQ_FLAG_ONESHOT, &prog_id);
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

/*
 * A basic put or get waiting on a failed lane's pending queue with fragments
 * of it in flight there (their completion is still to come): it posts
 * nothing more, and is sent again whole when they complete, with an error
 * or not (some may have landed). Moving what is left instead would leave
 * the lost fragments to the request's completion, which restarts only a
 * request of the basic protocol: on a configuration without an RMA lane
 * its rkey resolves to the software protocol, and the request completed
 * with the cancelled fragments' error. A held put waiting to flush counts
 * as a basic put (its zero-copy fragments may still be in flight).
 */
static int ucp_failover_rma_park(ucp_request_t *req)
{
    const ucp_rma_proto_t *basic = UCP_RKEY_RMA_PROTO(UCP_RKEY_BASIC_PROTO);
    ucp_ep_h ep                  = req->send.ep;

    if ((req->send.state.uct_comp.count == 0) ||
        (req->send.lane == UCP_NULL_LANE) ||
        !ucp_failover_lane_is_failed(ep, req->send.lane) ||
        !ucp_failover_can_redrive(ep)) {
        return 0;
    }

    if (req->send.uct.func == ucp_failover_put_flush_progress) {
        req->send.uct.func = basic->progress_put;
    } else if (!ucp_failover_rma_is_basic(req)) {
        return 0;
    }

    req->send.length = 0;
    uct_completion_update_status(&req->send.state.uct_comp,
                                 UCS_ERR_CANCELED);
    ucs_debug("req %p: ep %p RMA request waits for %d fragment(s) in flight "
              "on failed lane[%d], then is sent again whole", req, ep,
              req->send.state.uct_comp.count, req->send.lane);
    return 1;
}

int ucp_failover_reroute(ucp_request_t *req)
{
    ucp_ep_h ep = req->send.ep;
    int resent;

    req->send.pending_lane = UCP_NULL_LANE;
    if (ucp_failover_rma_park(req)) {
        return 0;
    }

    resent = ucp_failover_put_flush_reroute(req) ||
             ucp_failover_put_partial_reroute(req);
    if (ucp_failover_reroute_rkey_req(req)) {
        /* its rkey now resolves for the current configuration, so its
         * progress does not refresh it: its zero-copy buffer moves here
         * (else it posted the old memory domain's key: "local protection
         * error" on RC). If that cannot be done, its rkey is marked stale:
         * its progress refreshes it, and fails the request if it still
         * cannot */
        if ((req->send.lane != UCP_NULL_LANE) &&
            (ucp_failover_rma_buffer_move(req) != UCS_OK)) {
            req->send.rma.rkey->cache.ep_cfg_index = UCP_WORKER_CFG_INDEX_NULL;
        }
        ucs_debug("req %p: RMA/AMO request moved to lane[%d]%s", req,
                  req->send.lane, resent ? ", a put sent again whole" : "");
    } else if ((req->send.uct.func == ucp_ep_flush_progress_pending) &&
               ucp_failover_lane_is_failed(ep, req->send.lane)) {
        /* A flush waiting to flush the failed lane: that lane's work moved
         * to the other lanes, which the flush flushes on their own; its
         * completion slot is taken by a flush of the am lane instead */
        ucs_debug("req %p: flush of failed lane[%d] done on lane[%d]", req,
                  req->send.lane, ucp_ep_get_am_lane(ep));
        req->send.lane = ucp_ep_get_am_lane(ep);
    }

    return 1;
}
