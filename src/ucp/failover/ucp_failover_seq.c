/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * Sequencing: exactly-once, in-order delivery of the ordered messages of an
 * endpoint (everything UCP sends as active messages on the am lane) across a
 * change of the am lane.
 *
 * On an endpoint that negotiated failover, once it is connected, the am
 * lane's transport endpoint is wrapped by a sequencing endpoint (a UCP proxy
 * endpoint). Every active message UCP sends through it is copied into a
 * retention queue and sent as active message UCP_AM_ID_FAILOVER_SEQ with a
 * trailer: the receiver's endpoint id, a per-endpoint sequence number, the
 * original message id, and a cumulative acknowledgement of the messages the
 * sender delivered in the other direction. The receiver delivers a message to
 * the original handler only if it is the next in sequence; it drops one it
 * delivered already and holds back one that arrives early. Acknowledgements
 * ride on the messages of the other direction, or go alone (an ACK-only
 * trailer) after a batch of messages or bytes, when the sender asks for one,
 * and at every probe round. The sender releases what is acknowledged, and
 * stops accepting new messages while the retention holds more than
 * UCX_MULTIRAIL_RETAIN bytes (back-pressure: the requests wait in the
 * sequencing endpoint's own pending queue).
 *
 * When the am lane fails, the sequencing endpoint moves to the new am lane and
 * sends every message not acknowledged yet again, in order, before anything
 * new: what the peer had is dropped there as a duplicate, what it had not is
 * delivered, in order.
 *
 * Data streams. The other lanes that carry active-message fragments (the
 * am_bw lanes with UCX_MAX_EAGER_RAILS > 1: middle fragments of eager and AM
 * messages, rendezvous data sent as active messages) are wrapped too, each
 * in a stream of its own, numbered by the lane it starts on (stream id =
 * lane + 1; stream 0 is the ordered stream of the am lane). UCP places such
 * fragments by offset, so a data stream needs no order across lanes: its
 * receiver delivers in arrival order what is next in the stream, drops what
 * it delivered already and holds back what comes early (only after a lane
 * change), and acknowledges each stream with acknowledgement-only messages.
 * When a data stream's lane fails, the stream has no wrapper of its own any
 * more, and the am lane's wrapper sends what was not acknowledged again,
 * with the stream's own numbers, so the receiver delivers each fragment once.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucp_failover_seq_int.h"

#include <ucp/core/ucp_ep.h>
#include <ucp/core/ucp_ep.inl>
#include <ucp/core/ucp_proxy_ep.h>
#include <ucp/core/ucp_request.h>
#include <ucp/core/ucp_request.inl>
#include <ucp/core/ucp_worker.h>
#include <ucp/core/ucp_worker.inl>
#include <ucp/wireup/wireup_ep.h>
#include <uct/base/uct_iface.h>
#include <uct/base/uct_iov.inl>
#include <ucs/datastruct/string_buffer.h>
#include <ucs/debug/log.h>


/* ---------------------------------------------------------------------------
 * Installing and removing the sequencing endpoint
 */

int ucp_failover_ep_needs_remote_id(ucp_ep_h ep)
{
    return (ucp_failover_ep(ep)->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) &&
           !(ep->flags & UCP_EP_FLAG_REMOTE_ID);
}

static void ucp_failover_seq_adopt_cb(uct_pending_req_t *req, void *arg)
{
    ucp_failover_seq_ep_t *seq_ep = arg;

    uct_pending_req_queue_push(&seq_ep->pending, req);
    ucp_failover_seq_ep_gate_close(seq_ep);
}

/* Whether @a tl_ep is a connected transport endpoint a wrapper can take */
static int ucp_failover_seq_wrappable(uct_ep_h tl_ep)
{
    return (tl_ep != NULL) && (tl_ep != &ucp_failed_tl_ep) &&
           !ucp_wireup_ep_test(tl_ep) && !ucp_proxy_ep_test(tl_ep);
}

/* Wrap the transport endpoint of @a lane to send stream @a st */
static ucp_failover_seq_ep_t *
ucp_failover_seq_wrap(ucp_ep_h ep, ucp_failover_seq_t *seq,
                      ucp_failover_seq_stream_t *st, ucp_lane_index_t lane,
                      int adopt)
{
    uct_ep_h tl_ep = ep->uct_eps[lane];
    ucp_failover_seq_ep_t *seq_ep;
    ucs_status_t status;
    uct_ep_h uct_ep;

    status = ucp_failover_seq_ep_create(ep, tl_ep, seq, st, lane, &uct_ep);
    if (status != UCS_OK) {
        ucs_error("ep %p: cannot create the sequencing endpoint of lane[%d]: "
                  "%s", ep, lane, ucs_status_string(status));
        return NULL;
    }

    seq_ep            = ucs_derived_of(uct_ep, ucp_failover_seq_ep_t);
    ep->uct_eps[lane] = uct_ep;
    /* (wrapped once the peer's id is known: it does not change) */
    seq->remote_id    = ucp_ep_remote_id(ep);

    /* am lane: requests already waiting on the transport wait here, in
     * order. A data lane leaves them where they are (they are not ordered
     * against anything, and purging a live UCT/TCP queue would drop its own
     * connection events with them): they go unsequenced. */
    if (adopt) {
        uct_ep_pending_purge(tl_ep, ucp_failover_seq_adopt_cb, seq_ep);
    }
    return seq_ep;
}

/* Whether @a lane carries active-message fragments besides the am lane */
static int ucp_failover_seq_is_data_lane(ucp_ep_h ep, ucp_lane_index_t lane)
{
    const ucp_ep_config_key_t *key = &ucp_ep_config(ep)->key;
    int i;

    if (lane == key->am_lane) {
        return 0;
    }

    for (i = 0; (i < UCP_MAX_LANES) && (key->am_bw_lanes[i] != UCP_NULL_LANE);
         ++i) {
        if (key->am_bw_lanes[i] == lane) {
            return 1;
        }
    }

    return 0;
}

/* Data lanes get a wrapper each (once the am lane has its own); returns
 * whether a data lane is left without one (it is still being connected, or
 * its wrapper could not be made): a later probe round tries again */
static int
ucp_failover_seq_wrap_data_lanes(ucp_ep_h ep, ucp_failover_seq_t *seq)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    int left              = 0;
    ucp_failover_seq_stream_t *st;
    ucp_failover_seq_ep_t *seq_ep;
    ucp_lane_index_t lane;
    uct_ep_h uct_ep;

    if (!(fo->flags & UCP_FAILOVER_EP_FLAG_STRIPE)) {
        return 0; /* the am_bw slots hold the am lane */
    }

    for (lane = 0; lane < ucp_ep_num_lanes(ep); ++lane) {
        uct_ep = ep->uct_eps[lane];
        if ((fo->failed_lanes & UCS_BIT(lane)) ||
            !ucp_failover_seq_is_data_lane(ep, lane) ||
            ucp_failover_seq_ep_test(uct_ep)) {
            continue;
        }

        if (!ucp_failover_seq_wrappable(uct_ep)) {
            /* still connecting (a wireup endpoint) */
            left |= (uct_ep != NULL) && ucp_wireup_ep_test(uct_ep);
            continue;
        }

        st = ucp_failover_seq_stream_get(seq, lane + 1);
        if (st == NULL) {
            left = 1;
            continue;
        } else if (st->seq_ep != NULL) {
            continue;
        }

        seq_ep = ucp_failover_seq_wrap(ep, seq, st, lane, 0);
        if (seq_ep == NULL) {
            left = 1;
            continue;
        }

        /* what the am lane's wrapper sent of it while it was orphaned may
         * be lost with the am lane later, which would not send it again:
         * everything not acknowledged goes again here (duplicates are
         * dropped) */
        ucp_failover_seq_unsent_set(st,
                                    ucp_failover_seq_first_retained(st));
        ucs_debug("ep %p: data lane[%d] sequenced as stream %u from message "
                  "%u", ep, lane, st->id, st->tx_next);
        /* its backlog of an earlier failure goes on this lane now */
        if (!ucs_queue_is_empty(&seq_ep->pending) || (st->unsent != NULL)) {
            ucp_failover_seq_kick(seq_ep);
        }
    }

    return left;
}

int ucp_failover_seq_install(ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    ucp_failover_seq_ep_t *seq_ep;
    ucp_lane_index_t am_lane;
    ucp_failover_seq_t *seq;

    if (!(fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) ||
        (ep->flags & (UCP_EP_FLAG_FAILED | UCP_EP_FLAG_CLOSED))) {
        return 0; /* nothing to install, now or later */
    }

    if (((ep->flags & (UCP_EP_FLAG_REMOTE_ID | UCP_EP_FLAG_REMOTE_CONNECTED)) !=
         (UCP_EP_FLAG_REMOTE_ID | UCP_EP_FLAG_REMOTE_CONNECTED)) ||
        (ep->cfg_index == UCP_WORKER_CFG_INDEX_NULL)) {
        return 1; /* wireup goes on */
    }

    if ((fo->seq != NULL) && (fo->seq->seq_ep != NULL)) {
        return ucp_failover_seq_wrap_data_lanes(ep, fo->seq);
    }

    am_lane = ucp_ep_get_am_lane(ep);
    if ((am_lane == UCP_NULL_LANE) || (fo->failed_lanes & UCS_BIT(am_lane)) ||
        !ucp_failover_seq_wrappable(ep->uct_eps[am_lane])) {
        return 1; /* not connected yet: a later call installs it */
    }

    seq = ucp_failover_seq_get(ep);
    if (seq == NULL) {
        return 1;
    }

    seq_ep = ucp_failover_seq_wrap(ep, seq, &seq->main, am_lane, 1);
    if (seq_ep == NULL) {
        return 1;
    }

    seq->seq_ep = seq_ep;
    ucs_debug("ep %p: am lane[%d] sequenced from message %u", ep, am_lane,
              seq->main.tx_next);
    if (!ucs_queue_is_empty(&seq_ep->pending)) {
        ucp_failover_seq_kick(seq_ep);
    }

    return ucp_failover_seq_wrap_data_lanes(ep, seq);
}

void ucp_failover_seq_ep_connected(ucp_ep_h ep)
{
    if (ucp_failover_seq_install(ep)) {
        /* the probe rounds try again until it is done */
        ucp_failover_round_want(ucp_failover_ep(ep));
    }
}

/*
 * Take a data lane's wrapper off its transport endpoint, which stays in use
 * (it becomes the am lane's): the requests waiting in the wrapper go to
 * @a replay_q, its stream is orphaned. Its resume request may wait in the
 * transport's queue, which is not purged (that would drop UCT/TCP's own
 * queued connection events): the wrapper is then freed when the transport
 * dispatches the request, or when a later purge of that queue finds it.
 */
static uct_ep_h ucp_failover_seq_dissolve(ucp_failover_seq_ep_t *seq_ep,
                                          ucs_queue_head_t *replay_q)
{
    uct_pending_req_priv_queue_t *priv;

    uct_pending_queue_purge(priv, &seq_ep->pending, 1,
                            ucp_request_purge_enqueue_cb, replay_q);
    return ucp_failover_seq_unwrap(&seq_ep->super.super);
}

uct_ep_h ucp_failover_seq_unwrap(uct_ep_h uct_ep)
{
    ucp_failover_seq_ep_t *seq_ep;
    uct_ep_h tl_ep;

    if (!ucp_failover_seq_ep_test(uct_ep)) {
        return uct_ep;
    }

    seq_ep = ucs_derived_of(uct_ep, ucp_failover_seq_ep_t);
    tl_ep  = ucp_proxy_ep_extract(uct_ep);
    if ((seq_ep->busy == 0) && !seq_ep->resume_queued) {
        uct_ep_destroy(uct_ep);
        return tl_ep;
    }

    /* unwrapped from inside its own send (the transport failed the send and
     * the endpoint or the lane failed), or its resume request waits in the
     * live transport endpoint's queue (dissolved): detached now, freed from
     * progress, or when that request is dispatched or purged */
    seq_ep->dead = 1;
    ucp_failover_seq_ep_detach(seq_ep);
    seq_ep->seq = NULL;
    uct_worker_progress_unregister_safe(seq_ep->worker->uct,
                                        &seq_ep->dispatch_id);
    if (!seq_ep->resume_queued) {
        ucp_failover_seq_ep_free_dead(seq_ep);
    }
    return tl_ep;
}

static void ucp_failover_seq_stream_cleanup(ucp_failover_seq_stream_t *st)
{
    ucp_failover_seq_chunk_t *current = st->chunk;
    ucp_failover_seq_entry_t *entry;
    ucp_failover_seq_held_t *held, *tmp;

    /* the chunks leave the stream and go with their last entry (a
     * zero-copy send may still read one) */
    if (current != NULL) {
        ucp_failover_seq_chunk_detach(current);
        if (current->live == 0) {
            ucp_failover_seq_chunk_release(current);
        }
    }

    ucs_queue_for_each_extract(entry, &st->retained, queue, 1) {
        entry->seq = NULL;
        if (entry->chunk != NULL) {
            ucp_failover_seq_chunk_detach(entry->chunk);
        } else if (entry->flags & UCP_FAILOVER_SEQ_ENTRY_REF) {
            /* not copied when its lane went (no memory): its request
             * fails */
            ucp_failover_seq_entry_ref(entry)->status = UCS_ERR_CANCELED;
        }
        if (entry->comp.count == 0) {
            ucp_failover_seq_entry_free(entry);
        } /* else its completion frees it */
    }

    ucs_list_for_each_safe(held, tmp, &st->held, list) {
        ucs_free(held);
    }
}

void ucp_failover_seq_cleanup(ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    ucp_failover_seq_t *seq = fo->seq;
    ucp_failover_seq_ep_t *seq_ep;
    uint8_t id;

    if (seq == NULL) {
        return;
    }

    for (id = 0; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        if ((seq->streams[id] == NULL) ||
            (seq->streams[id]->seq_ep == NULL)) {
            continue;
        }

        /* its lane was not destroyed (an error path): the wrapper lets go of
         * the transport endpoint (not destroyed by it later, from inside
         * that endpoint's own pending queue), and whoever destroys the
         * wrapper finds it dead, with nothing of the endpoint's */
        seq_ep = seq->streams[id]->seq_ep;
        ucs_diag("ep %p: sequencing endpoint %p outlives the endpoint", ep,
                 seq_ep);
        (void)ucp_proxy_ep_extract(&seq_ep->super.super);
        seq_ep->dead = 1;
        ucp_failover_seq_ep_detach(seq_ep);
        seq_ep->seq = NULL;
        uct_worker_progress_unregister_safe(seq_ep->worker->uct,
                                            &seq_ep->dispatch_id);
    }

    for (id = 0; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        if (seq->streams[id] != NULL) {
            ucp_failover_seq_stream_cleanup(seq->streams[id]);
            if (id != 0) {
                ucs_free(seq->streams[id]);
                /* (the cleanup of a later stream may close the gates of
                 * the wrappers of those left, ucp_failover_seq_gates_close) */
                seq->streams[id] = NULL;
            }
        }
    }

    /* requests of messages sent by reference that left the retention and
     * wait for progress to complete */
    ucp_failover_seq_refs_flush(seq);

    ucp_failover_pool_unref(seq->pool);
    ucs_free(seq);
    fo->seq = NULL;
}

/* ---------------------------------------------------------------------------
 * The am lane changes
 */

typedef struct {
    ucp_worker_h      worker;
    ucs_ptr_map_key_t ep_id;
    ucp_lane_index_t  lane;
    ucs_status_t      status;
} ucp_failover_seq_deferred_t;

static unsigned ucp_failover_seq_deferred_error(void *arg)
{
    ucp_failover_seq_deferred_t *d = arg;
    ucp_worker_h worker            = d->worker;
    ucp_ep_h ep;

    UCS_ASYNC_BLOCK(&worker->async);
    if ((ucp_worker_get_ep_by_id(worker, d->ep_id, &ep) == UCS_OK) &&
        !(ep->flags & UCP_EP_FLAG_FAILED)) {
        ucp_failover_ep_lane_fault(ep, d->lane, "transport error", d->status);
    }
    UCS_ASYNC_UNBLOCK(&worker->async);
    ucs_free(d);
    return 1;
}

int ucp_failover_seq_defer_error(ucp_ep_h ep, ucp_lane_index_t lane,
                                 ucs_status_t status)
{
    uct_worker_cb_id_t cb_id = UCS_CALLBACKQ_ID_NULL;
    ucp_failover_seq_deferred_t *d;
    ucp_failover_seq_ep_t *seq_ep;

    if ((ucp_failover_ep(ep)->seq == NULL) || (lane >= ucp_ep_num_lanes(ep)) ||
        !ucp_failover_seq_ep_test(ep->uct_eps[lane])) {
        return 0;
    }

    seq_ep = ucs_derived_of(ep->uct_eps[lane], ucp_failover_seq_ep_t);
    if ((seq_ep->busy == 0) || seq_ep->dead) {
        return 0;
    }

    /* The lane failed inside its wrapper's own send (the transport reported
     * it synchronously): moving or dropping the wrapper and replaying its
     * waiting requests now would let them overtake the request being sent,
     * and free the wrapper under its own call. Fail the lane over from
     * progress; meanwhile what is sent is retained and sent again then. */
    d = ucs_malloc(sizeof(*d), "failover_seq_deferred");
    if (d == NULL) {
        return 0;
    }

    seq_ep->failing = 1;

    d->worker = ep->worker;
    d->ep_id  = ucp_ep_local_id(ep);
    d->lane   = lane;
    d->status = status;
    uct_worker_progress_register_safe(ep->worker->uct,
                                      ucp_failover_seq_deferred_error, d,
                                      UCS_CALLBACKQ_FLAG_ONESHOT, &cb_id);
    ucp_worker_signal_internal(ep->worker);
    return 1;
}

int ucp_failover_seq_active(ucp_ep_h ep)
{
    ucp_failover_seq_t *seq = ucp_failover_ep(ep)->seq;

    return (seq != NULL) && (seq->seq_ep != NULL);
}

uct_ep_h ucp_failover_seq_am_lane_moved(ucp_ep_h ep, ucp_lane_index_t old_lane,
                                        ucs_queue_head_t *replay_q)
{
    ucp_failover_seq_t *seq       = ucp_failover_ep(ep)->seq;
    ucp_failover_seq_ep_t *seq_ep = seq->seq_ep;
    ucp_lane_index_t new_lane     = ucp_ep_get_am_lane(ep);
    ucp_failover_seq_stream_t *st;
    ucp_failover_seq_ep_t *data_ep;
    uct_pending_req_priv_queue_t *priv;
    ucp_failover_seq_purge_arg_t purge;
    UCS_STRING_BUFFER_ONSTACK(desc, 128);
    uct_ep_h old_tl_ep;
    size_t count, n;
    size_t orphans = 0;
    ucp_failover_seq_stream_t *dissolved = NULL;
    uint8_t id;

    ucs_assert(ep->uct_eps[old_lane] == &seq_ep->super.super);

    /* the requests pending on the old lane, then those that waited for the
     * window, are sent again by the caller, after the retained messages */
    old_tl_ep    = ucp_failover_seq_tl_ep(seq_ep);
    purge.seq_ep = seq_ep;
    purge.cb     = ucp_request_purge_enqueue_cb;
    purge.arg    = replay_q;
    uct_ep_pending_purge(old_tl_ep, ucp_failover_seq_purge_filter, &purge);
    uct_pending_queue_purge(priv, &seq_ep->pending, 1,
                            ucp_request_purge_enqueue_cb, replay_q);
    seq_ep->resume_queued = 0;
    seq_ep->window_full   = 0;
    seq_ep->failing       = 0;

    /* the new am lane was a data lane: its stream loses its wrapper (and
     * goes again on the new am lane), its requests are sent again too */
    if (ucp_failover_seq_ep_test(ep->uct_eps[new_lane])) {
        data_ep               = ucs_derived_of(ep->uct_eps[new_lane],
                                               ucp_failover_seq_ep_t);
        dissolved             = data_ep->stream;
        ep->uct_eps[new_lane] = ucp_failover_seq_dissolve(data_ep, replay_q);
    }

    /* the sequencing endpoint takes the new lane's transport endpoint; the
     * caller discards the old one */
    ucp_proxy_ep_set_uct_ep(&seq_ep->super, ep->uct_eps[new_lane], 1,
                            ucp_ep_get_rsc_index(ep, new_lane));
    ep->uct_eps[new_lane] = &seq_ep->super.super;
    ep->uct_eps[old_lane] = old_tl_ep;
    ucp_failover_seq_ep_limits(seq_ep, ep, new_lane);


    /* everything not acknowledged goes again, first, in order */
    count = ucs_queue_length(&seq->main.retained);

    /* Acknowledgements went on the old lane too, unretained: the last ones
     * may be lost with it (the peer's retained messages then fill its
     * window, and it waits for good). Acknowledge again on the new lane:
     * the messages sent again carry it, else an ack-only message does. */
    seq->main.ack_again  = 1;
    seq->main.tx_resent += count;
    ucp_failover_round_want(ucp_failover_ep(ep));
    ucp_failover_seq_unsent_set(&seq->main,
                                ucp_failover_seq_first_retained(&seq->main));

    /* so do the data streams' acknowledgements, and the data streams
     * without a lane of their own sent what they hold on the old lane */
    for (id = 1; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        st = seq->streams[id];
        if (st == NULL) {
            continue;
        }

        st->ack_again = 1;
        if (ucp_failover_seq_orphan(st) && !ucs_queue_is_empty(&st->retained)) {
            ucp_failover_seq_unsent_set(st,
                                        ucp_failover_seq_first_retained(st));
            n          = ucs_queue_length(&st->retained);
            orphans   += n;
            /* (a stream orphaned just now counted them already) */
            st->tx_resent += (st != dissolved) ? n : 0;
        }
    }

    ucs_string_buffer_appendf(&desc, "lane[%d] ", old_lane);
    ucp_ep_get_lane_info_str(ep, old_lane, &desc);
    ucs_string_buffer_appendf(&desc, " to lane[%d] ", new_lane);
    ucp_ep_get_lane_info_str(ep, new_lane, &desc);
    ucs_log(ucp_failover_log_level(ep->worker),
            "ep %p: am lane moved from %s; %zu message(s) not acknowledged "
            "are sent again (%u..%u), and %zu data fragment(s)", ep,
            ucs_string_buffer_cstr(&desc), count,
            (seq->main.unsent != NULL) ? seq->main.unsent->sn : 0,
            seq->main.tx_next - 1, orphans);
    return old_tl_ep;
}

void ucp_failover_seq_resend(ucp_ep_h ep)
{
    ucp_failover_seq_t *seq = ucp_failover_ep(ep)->seq;
    ucp_failover_seq_stream_t *st;
    uint8_t id;

    if ((seq == NULL) || (seq->seq_ep == NULL)) {
        return;
    }

    for (id = 1; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        st = seq->streams[id];
        if ((st != NULL) && (st->orphaned > 0)) {
            ucs_log(ucp_failover_log_level(ep->worker),
                    "ep %p: data stream %u lost its lane; %u fragment(s) "
                    "not acknowledged are sent again on the am lane "
                    "(%u..%u)", ep, id, st->orphaned,
                    (st->unsent != NULL) ? st->unsent->sn : 0,
                    st->tx_next - 1);
            st->orphaned = 0;
        }
    }

    for (id = 0; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        if (seq->streams[id] != NULL) {
            /* a request for an acknowledgement may be lost with the lane */
            seq->streams[id]->ack_asked = 0;
        }
    }

    ucp_failover_seq_kick(seq->seq_ep);
    for (id = 0; (id < UCP_FAILOVER_SEQ_STREAMS) && (seq->seq_ep != NULL);
         ++id) {
        st = seq->streams[id];
        if ((st != NULL) && st->ack_again) {
            /* nothing carried it: on its own (else the next probe round) */
            ucp_failover_seq_send_ack(seq, st);
        }
    }
}

/* ---------------------------------------------------------------------------
 * Interface limits, information
 */

void ucp_failover_iface_attr(ucp_worker_h worker, ucp_rsc_index_t rsc_index,
                             uct_iface_attr_t *attr)
{
    ucp_context_h context = worker->context;
    const size_t hdr_len  = UCP_FAILOVER_SEQ_HDR_LEN;
    ucp_md_index_t md_index;
    int need_memh;

    if (!ucp_failover_is_enabled(context)) {
        return;
    }

    /* A zero-copy send is sent by reference with its trailer as one more
     * iov element (ucp_failover_seq_send_ref), or copied and posted from the
     * copy (small ones, and messages sent again). A transport whose memory
     * domain needs memory handles (RDMA) takes the trailer from a registered
     * buffer, which exists only when messages are sent by reference
     * (UCX_MULTIRAIL_REF_THRESH; by default every one there) and are
     * registered on the transport's memory domain; else UCP sends its large
     * active messages as bcopy fragments, a copy as well. There a copy (a
     * message smaller than the threshold, or one sent again on another
     * lane: the user's memory handle is of the first lane's device) is sent
     * as bcopy, so a zero-copy message must fit one with the header and
     * trailer. */
    md_index  = context->tl_rscs[rsc_index].md_index;
    need_memh = !!(context->tl_mds[md_index].attr.cap.flags &
                   UCT_MD_FLAG_NEED_MEMH);
    if (need_memh && !ucp_failover_pool_reg_covers(context, md_index)) {
        attr->cap.flags &= ~UCT_IFACE_FLAG_AM_ZCOPY;
    }

    /* a sequenced message carries the trailer on top of what UCP packs */
    if (attr->cap.flags & UCT_IFACE_FLAG_AM_SHORT) {
        attr->cap.am.max_short = (attr->cap.am.max_short > hdr_len) ?
                                 (attr->cap.am.max_short - hdr_len) : 0;
    }

    if (attr->cap.flags & UCT_IFACE_FLAG_AM_BCOPY) {
        attr->cap.am.max_bcopy = (attr->cap.am.max_bcopy > hdr_len) ?
                                 (attr->cap.am.max_bcopy - hdr_len) : 0;
    }

    /* zero-copy sends are copied and sent whole, header included */
    if (attr->cap.flags & UCT_IFACE_FLAG_AM_ZCOPY) {
        if (attr->cap.am.max_zcopy > (hdr_len + attr->cap.am.max_hdr)) {
            attr->cap.am.max_zcopy -= hdr_len + attr->cap.am.max_hdr;
        } else {
            attr->cap.flags &= ~UCT_IFACE_FLAG_AM_ZCOPY;
        }
    }

    /* ... and a copy must fit a bcopy message where it cannot be sent with
     * zero copy (max_bcopy is the trailer's less already) */
    if (need_memh && (attr->cap.flags & UCT_IFACE_FLAG_AM_ZCOPY)) {
        if ((attr->cap.flags & UCT_IFACE_FLAG_AM_BCOPY) &&
            (attr->cap.am.max_bcopy > attr->cap.am.max_hdr)) {
            attr->cap.am.max_zcopy = ucs_min(attr->cap.am.max_zcopy,
                                             attr->cap.am.max_bcopy -
                                             attr->cap.am.max_hdr);
        } else {
            attr->cap.flags &= ~UCT_IFACE_FLAG_AM_ZCOPY;
        }

        /* none could be sent by reference: UCP would register the user's
         * buffers only for the wrapper to copy them */
        if (ucp_failover_ref_thresh(context, need_memh) >
            (attr->cap.am.max_zcopy + attr->cap.am.max_hdr)) {
            attr->cap.flags &= ~UCT_IFACE_FLAG_AM_ZCOPY;
        }
    }

    /* Atomics go to the peer's CPU as messages on the sequenced am lane
     * (as with UCX_ATOMIC_MODE=cpu), never to a network device: a device
     * atomic in flight on a failing lane may or may not have run, and the
     * peer's device keeps no record to ask, so it could be neither sent
     * again nor completed; a message is sent again and delivered once. Not
     * offering device atomics also keeps the worker from advertising them,
     * so a peer's atomics on this worker's memory all take the same way.
     * Intra-node transports keep theirs. */
    if (context->tl_rscs[rsc_index].tl_rsc.dev_type == UCT_DEVICE_TYPE_NET) {
        attr->cap.flags &= ~UCT_IFACE_FLAG_ATOMIC_DEVICE;
    }
}

size_t ucp_failover_seq_hdr_len(void)
{
    return UCP_FAILOVER_SEQ_HDR_LEN;
}

void ucp_failover_seq_pack_hdr(void *dest, uint64_t ep_id, uint32_t sn,
                               uint8_t am_id, uint8_t stream)
{
    ucp_failover_seq_hdr_t hdr = {ep_id, sn, 0, am_id, 0, stream};

    memcpy(dest, &hdr, sizeof(hdr));
}

void ucp_failover_seq_pack_ack(void *dest, uint64_t ep_id, uint32_t ack,
                               uint8_t stream)
{
    ucp_failover_seq_hdr_t hdr = {ep_id, 0, ack, 0,
                                  UCP_FAILOVER_SEQ_FLAG_ACK_ONLY, stream};

    memcpy(dest, &hdr, sizeof(hdr));
}

void ucp_failover_seq_tx_state(ucp_ep_h ep, uint8_t stream, uint32_t *next_p,
                               uint32_t *acked_p, size_t *retained_p)
{
    ucp_failover_seq_stream_t *st = ucp_failover_seq_stream_find(ep, stream);

    *next_p     = (st == NULL) ? 0 : st->tx_next;
    *acked_p    = (st == NULL) ? 0 : st->tx_acked;
    *retained_p = (st == NULL) ? 0 : ucs_queue_length(&st->retained);
}

uint64_t ucp_failover_seq_acks_sent(ucp_ep_h ep, uint8_t stream)
{
    ucp_failover_seq_stream_t *st = ucp_failover_seq_stream_find(ep, stream);

    return (st == NULL) ? 0 : st->acks_sent;
}

void ucp_failover_seq_limit(ucp_ep_h ep, size_t max_short, size_t max_bcopy)
{
    ucp_failover_seq_t *seq = ucp_failover_ep(ep)->seq;

    if ((seq != NULL) && (seq->seq_ep != NULL)) {
        seq->seq_ep->max_short = ucs_min(seq->seq_ep->max_short, max_short);
        seq->seq_ep->max_bcopy = ucs_min(seq->seq_ep->max_bcopy, max_bcopy);
        ucp_failover_seq_ep_short_span(seq->seq_ep);
    }
}

uint64_t ucp_failover_seq_stream_resent(ucp_ep_h ep, uint8_t id)
{
    ucp_failover_seq_stream_t *st = ucp_failover_seq_stream_find(ep, id);

    return (st == NULL) ? 0 : st->tx_resent;
}

void ucp_failover_seq_info(ucp_ep_h ep, ucs_string_buffer_t *strb)
{
    ucp_failover_seq_t *seq = ucp_failover_ep(ep)->seq;
    ucp_failover_seq_stream_t *st;
    uint8_t id;

    if (seq == NULL) {
        ucs_string_buffer_appendf(strb, "not sequenced");
        return;
    }

    st = &seq->main;
    ucs_string_buffer_appendf(strb,
                              "sequenced %s: sent %" PRIu64 " (%" PRIu64
                              " sent again, %zu bytes retained, at most %zu, "
                              "%u stall(s)), received %" PRIu64 " (%" PRIu64
                              " duplicate(s), %" PRIu64 " held back), %" PRIu64
                              " ack(s) sent alone, %" PRIu64 " sent by "
                              "reference (%" PRIu64 " copied to go again, %u "
                              "retained)",
                              (seq->seq_ep != NULL) ? "on" : "off",
                              ucp_failover_seq_tx_msgs(st), st->tx_resent,
                              st->retained_bytes, st->retained_max,
                              st->window_stalls, ucp_failover_seq_rx_msgs(st),
                              st->rx_dups, st->rx_held, st->acks_sent,
                              st->tx_refs, st->tx_ref_copies, st->refs);

    /* where the sequence stands (a stalled endpoint shows why) */
    ucs_string_buffer_appendf(strb, "; next %u, acknowledged up to %u, "
                              "oldest unacknowledged %u, first unsent %u, "
                              "expecting %u, acknowledged to the peer up to "
                              "%u, %" PRIu64 " ack(s) not taken (%s), %zu "
                              "held", st->tx_next, st->tx_acked,
                              ucs_queue_is_empty(&st->retained) ? 0 :
                              ucp_failover_seq_first_retained(st)->sn,
                              (st->unsent != NULL) ? st->unsent->sn : 0,
                              st->rx_next, st->rx_ack_sent, st->acks_unsent,
                              ucs_status_string(st->ack_status),
                              ucs_list_length(&st->held));
    if (seq->seq_ep != NULL) {
        ucs_string_buffer_appendf(strb, "; %zu request(s) waiting%s%s%s%s",
                                  ucs_queue_length(&seq->seq_ep->pending),
                                  seq->seq_ep->window_full ?
                                  ", window full" : "",
                                  seq->seq_ep->resume_queued ?
                                  ", resume queued" : "",
                                  seq->seq_ep->failing ? ", failing" : "",
                                  seq->seq_ep->dead ? ", dead" : "");
    }

    /* data streams: fragments striped over the other lanes */
    for (id = 1; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        st = seq->streams[id];
        if (st == NULL) {
            continue;
        }

        ucs_string_buffer_appendf(strb, "; data stream %u (%s): sent %" PRIu64
                                  " (%" PRIu64 " sent again, %zu bytes "
                                  "retained, at most %zu, %u stall(s)), "
                                  "received %" PRIu64 " (%" PRIu64
                                  " duplicate(s), %" PRIu64 " held back), %"
                                  PRIu64 " ack(s), %" PRIu64 " by reference "
                                  "(%" PRIu64 " copied to go again, %u "
                                  "retained)", id,
                                  (st->seq_ep != NULL) ?
                                  "on its lane" : "via the am lane",
                                  ucp_failover_seq_tx_msgs(st), st->tx_resent,
                                  st->retained_bytes, st->retained_max,
                                  st->window_stalls,
                                  ucp_failover_seq_rx_msgs(st), st->rx_dups,
                                  st->rx_held, st->acks_sent, st->tx_refs,
                                  st->tx_ref_copies, st->refs);
    }
}
