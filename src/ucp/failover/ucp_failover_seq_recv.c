/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * Sequencing, the receiver: a sequenced message is delivered to its own
 * handler if it is the next of its stream, dropped if it was delivered
 * already, held back if it came early; acknowledgements ride on the
 * messages of the other direction or go alone. The overview is in
 * ucp_failover_seq.c.
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


ucs_status_t ucp_failover_seq_send_ack(ucp_failover_seq_t *seq,
                                       ucp_failover_seq_stream_t *st)
{
    return ucp_failover_seq_send_ack_flags(seq, st, 0, 0);
}

/* Ask the sender for stream @a st again after what was delivered; until the
 * request is sent, each probe round tries again */
static void ucp_failover_seq_ask_resend(ucp_failover_seq_t *seq,
                                         ucp_failover_seq_stream_t *st)
{
    if (ucp_failover_seq_send_ack_flags(seq, st, UCP_FAILOVER_SEQ_FLAG_RESEND,
                                        0) == UCS_OK) {
        st->resend_owed = 0;
    }
}

/* The receiver asks for stream @a st again after what it acknowledged: every
 * message retained goes again, from progress (duplicates are dropped) */
static void ucp_failover_seq_peer_asks_resend(ucp_failover_seq_t *seq,
                                           ucp_failover_seq_stream_t *st)
{
    ucp_failover_seq_ep_t *seq_ep = (st->seq_ep != NULL) ? st->seq_ep :
                                    seq->seq_ep;

    ucp_failover_seq_unsent_set(st, ucp_failover_seq_first_retained(st));
    if (st->unsent == NULL) {
        return;
    }

    st->tx_resent += ucs_queue_length(&st->retained);
    ucs_diag("ep %p: the peer asks for stream %u again from message %u",
             seq->ep, st->id, st->unsent->sn);
    if ((seq_ep != NULL) && !seq_ep->dead) {
        ucp_failover_seq_dispatch_schedule(seq_ep);
    }
}

int ucp_failover_seq_round(ucp_ep_h ep)
{
    ucp_failover_seq_t *seq = ucp_failover_ep(ep)->seq;
    int owed                = 0;
    ucp_failover_seq_stream_t *st;
    uint8_t id;

    if (seq == NULL) {
        return 0;
    }

    /* acknowledgements not sent yet, and backlogs that wait for a lane */
    for (id = 0; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        st = seq->streams[id];
        if (st == NULL) {
            continue;
        }

        if (ucs_unlikely(st->resend_owed)) {
            ucp_failover_seq_ask_resend(seq, st);
        } else if (ucp_failover_seq_ack_owed(st)) {
            ucp_failover_seq_send_ack(seq, st);
        }

        if (ucs_unlikely((st->refs != 0) && !st->ack_asked)) {
            /* messages sent by reference whose request for an
             * acknowledgement the lane did not take */
            ucp_failover_seq_ask_ack(seq, st);
        }

        if (ucp_failover_seq_ep_waiting(st->seq_ep)) {
            ucp_failover_seq_kick(st->seq_ep);
        }

        /* what is still owed keeps the endpoint in the rounds: a request
         * the lane did not take, a backlog the transport holds up */
        owed |= st->resend_owed || ucp_failover_seq_ack_owed(st) ||
                ucp_failover_seq_ep_waiting(st->seq_ep) ||
                ((st->refs != 0) && !st->ack_asked);
    }

    return owed;
}

/* Hand a message to its own handler, if @a am_ids has its id */
static UCS_F_ALWAYS_INLINE ucs_status_t
ucp_failover_seq_deliver(ucp_worker_h worker, uint64_t am_ids, uint8_t id,
                         void *data, size_t length, unsigned flags)
{
    if (ucs_unlikely((id >= 64) || !(am_ids & UCS_BIT(id)))) {
        ucs_diag("worker %p: dropping sequenced message with id %d", worker,
                 id);
        return UCS_OK;
    }

    return ucp_am_handlers[id]->cb(worker, data, length, flags);
}

/*
 * Hold back a message that arrived early, in order of numbers. Early
 * messages come in increasing order but for the odd one sent again, so the
 * place is searched from the newest. Without memory to hold it, the sender
 * is asked to send the stream again from the gap (nothing is dropped for
 * good: the sender retains everything not acknowledged).
 */
static void ucp_failover_seq_hold(ucp_failover_seq_t *seq,
                                  ucp_failover_seq_stream_t *st,
                                  const ucp_failover_seq_hdr_t *hdr,
                                  const void *data, size_t length)
{
    ucs_list_link_t *after;
    ucp_failover_seq_held_t *held, *pos;

    for (after = st->held.prev; after != &st->held; after = after->prev) {
        pos = ucs_container_of(after, ucp_failover_seq_held_t, list);
        if (pos->sn == hdr->sn) {
            ++st->rx_dups; /* held already */
            return;
        } else if ((int32_t)(pos->sn - hdr->sn) < 0) {
            break;
        }
    }

    held = ucs_malloc(sizeof(*held) + length, "failover_seq_held");
    if (held == NULL) {
        ucs_diag("ep %p: no memory to hold back message %u:%u, asking for "
                 "the stream again from %u", seq->ep, st->id, hdr->sn,
                 st->rx_next);
        st->resend_owed = 1;
        ucp_failover_round_want(ucp_failover_ep(seq->ep));
        ucp_failover_seq_ask_resend(seq, st);
        return;
    }

    held->sn     = hdr->sn;
    held->am_id  = hdr->am_id;
    held->flags  = hdr->flags;
    held->length = length;
    memcpy(held->data, data, length);
    ++st->rx_held;
    ucs_list_insert_after(after, &held->list);
    ucp_failover_seq_rx_slow_sync(st);
}

/* Deliver the held messages now in order; returns whether one asked for an
 * acknowledgement */
static int ucp_failover_seq_deliver_held(ucp_failover_seq_t *seq,
                                         ucp_failover_seq_stream_t *st)
{
    ucp_worker_h worker = seq->ep->worker;
    int ack_req         = 0;
    ucp_failover_seq_held_t *held;
    ucs_status_t status;

    while (!ucs_list_is_empty(&st->held)) {
        held = ucs_list_head(&st->held, ucp_failover_seq_held_t, list);
        if (held->sn != st->rx_next) {
            break;
        }

        ucs_list_del(&held->list);
        ++st->rx_next;
        ucp_failover_seq_rx_weigh(st, held->length);
        status = ucp_failover_seq_deliver(worker, seq->am_ids, held->am_id,
                                          held->data, held->length, 0);
        ucs_assert(status != UCS_INPROGRESS);
        ack_req |= !!(held->flags & UCP_FAILOVER_SEQ_FLAG_ACK_REQ);
        ucs_free(held);
    }

    ucp_failover_seq_rx_slow_sync(st);
    return ack_req;
}

/* Deliver @a hdr's message, the next of @a st, and those held back behind
 * it; whether an acknowledgement is owed now (asked for, or a batch is
 * full) */
static UCS_F_ALWAYS_INLINE ucs_status_t
ucp_failover_seq_deliver_next(ucp_worker_h worker, ucp_failover_seq_t *seq,
                              ucp_failover_seq_stream_t *st,
                              const ucp_failover_seq_hdr_t *hdr, void *data,
                              size_t length, unsigned flags, int *ack_owed_p)
{
    int ack_req = hdr->flags & UCP_FAILOVER_SEQ_FLAG_ACK_REQ;
    ucs_status_t status;

    ++st->rx_next;
    ucp_failover_seq_rx_weigh(st, length);
    if (ack_req && ucs_list_is_empty(&st->held) &&
        (ucp_failover_seq_send_ack(seq, st) == UCS_OK)) {
        /* asked for (a request waits for it): before the delivery, which
         * nothing can stop now, so that the acknowledgement's way back
         * overlaps the handler's work (the copy of a large message) */
        ack_req = 0;
    }

    status = ucp_failover_seq_deliver(worker, seq->am_ids, hdr->am_id, data,
                                      length, flags);
    if (ucs_unlikely(!ucs_list_is_empty(&st->held))) {
        ack_req |= ucp_failover_seq_deliver_held(seq, st);
    }

    if (ucs_unlikely(st->ack_wanted) &&
        ((int32_t)(ucp_failover_seq_rx_delivered(st) - st->rx_ack_wanted) >=
         0)) {
        /* the peer asked for this acknowledgement before it could be */
        st->ack_wanted = 0;
        ack_req        = 1;
        ucp_failover_seq_rx_slow_sync(st);
    }

    *ack_owed_p = ack_req || ucp_failover_seq_ack_batch_full(st);
    return status;
}

static ucs_status_t ucp_failover_seq_rx(ucp_worker_h worker, void *data,
                                        size_t length, unsigned flags,
                                        ucp_failover_seq_t **seq_p,
                                        ucp_failover_seq_stream_t **st_p)
{
    ucp_failover_seq_hdr_t hdr;
    ucp_failover_seq_stream_t *st;
    ucp_failover_seq_t *seq;
    ucs_status_t status;
    ucp_ep_h ep;
    int32_t diff;
    int ack_owed;

    *st_p = NULL;
    if (length < UCP_FAILOVER_SEQ_HDR_LEN) {
        ucs_diag("worker %p: ignoring sequenced message of %zu bytes", worker,
                 length);
        return UCS_OK;
    }

    length -= UCP_FAILOVER_SEQ_HDR_LEN;
    memcpy(&hdr, UCS_PTR_BYTE_OFFSET(data, length), sizeof(hdr));
    if ((hdr.ep_id == UCS_PTR_MAP_KEY_INVALID) ||
        (ucp_worker_get_ep_by_id(worker, hdr.ep_id, &ep) != UCS_OK)) {
        /* the endpoint is gone: a sequenced message can be one sent again
         * after a failover, which it may have delivered already */
        if (!(hdr.flags & UCP_FAILOVER_SEQ_FLAG_ACK_ONLY)) {
            ucs_diag("worker %p: dropping sequenced message %u:%u (id %d) "
                     "for endpoint 0x%" PRIx64 ", which is gone", worker,
                     hdr.stream, hdr.sn, hdr.am_id, hdr.ep_id);
        }
        return UCS_OK;
    }

    if (hdr.stream >= UCP_FAILOVER_SEQ_STREAMS) {
        ucs_diag("ep %p: dropping sequenced message %u of unknown stream %u",
                 ep, hdr.sn, hdr.stream);
        return UCS_OK;
    }

    seq = ucp_failover_seq_get(ep);
    st  = (seq == NULL) ? NULL : ucp_failover_seq_stream_get(seq, hdr.stream);
    if (st == NULL) {
        /* no memory (logged): delivered as it comes */
        return (hdr.flags & UCP_FAILOVER_SEQ_FLAG_ACK_ONLY) ?
               UCS_OK :
               ucp_failover_seq_deliver(worker,
                                        ucp_failover_seq_am_ids(
                                                worker->context),
                                        hdr.am_id, data, length, flags);
    }

    *seq_p = seq;
    if (hdr.flags & UCP_FAILOVER_SEQ_FLAG_ACK_ONLY) {
        ucp_failover_seq_release(seq, st, hdr.ack);
        if (ucs_unlikely(hdr.flags & UCP_FAILOVER_SEQ_FLAG_RESEND)) {
            ucp_failover_seq_peer_asks_resend(seq, st);
        } else if (hdr.flags & UCP_FAILOVER_SEQ_FLAG_ACK_REQ) {
            /* the peer waits for an acknowledgement of this stream up to
             * hdr.sn (its messages sent by reference): at once if they are
             * delivered, else as soon as they are (a data stream's messages
             * come on another lane than the request) */
            if ((int32_t)(hdr.sn - ucp_failover_seq_rx_delivered(st)) > 0) {
                st->ack_wanted    = 1;
                st->rx_ack_wanted = hdr.sn;
                ucp_failover_seq_rx_slow_sync(st);
            } else {
                *st_p = st;
            }
        }
        return UCS_OK;
    }

    /* a message owes an acknowledgement: the next probe round sends it if
     * no message of ours carries it before */
    ucp_failover_round_want(ucp_failover_ep(ep));

    /* a message of any stream acknowledges stream 0 */
    ucp_failover_seq_release(seq, &seq->main, hdr.ack);

    diff = (int32_t)(hdr.sn - st->rx_next);
    if (diff < 0) {
        /* delivered already (sent again after a failover) */
        ++st->rx_dups;
        *st_p = st;
        return UCS_OK;
    } else if (diff > 0) {
        ucp_failover_seq_hold(seq, st, &hdr, data, length);
        return UCS_OK;
    }

    status = ucp_failover_seq_deliver_next(worker, seq, st, &hdr, data, length,
                                           flags, &ack_owed);
    if (ack_owed) {
        *st_p = st;
    }

    return status;
}

/* Slow path of a sequenced message: duplicates, early ones, held ones to
 * deliver after it, data streams, acknowledgements alone, unknown
 * endpoints */
static UCS_F_NOINLINE ucs_status_t
ucp_failover_seq_handler_slow(ucp_worker_h worker, void *data, size_t length,
                              unsigned flags)
{
    ucp_failover_seq_stream_t *st;
    ucp_failover_seq_t *seq;
    ucs_status_t status;

    status = ucp_failover_seq_rx(worker, data, length, flags, &seq, &st);
    if ((st != NULL) && (ucp_failover_seq_send_ack(seq, st) != UCS_OK)) {
        /* a batch, a request, or a duplicate (the sender's acks were lost):
         * owed, until the lane takes it (the probe rounds) */
        st->ack_again = 1;
        ucp_failover_round_want(ucp_failover_ep(seq->ep));
    }

    return status;
}

/* Deliver the usual message (ucp_failover_seq_handler_ep()), checked and
 * its acknowledgement released, as a tail call of its handler */
static UCS_F_ALWAYS_INLINE ucs_status_t
ucp_failover_seq_deliver_usual(ucp_worker_h worker, ucp_failover_seq_t *seq,
                               void *data, size_t length, unsigned flags)
{
    const ucp_failover_seq_hdr_t *hdr =
            UCS_PTR_BYTE_OFFSET(data, length - UCP_FAILOVER_SEQ_HDR_LEN);

    /* what the checks read is read again here, not kept in registers
     * across the release: no frame */
    ucs_compiler_fence();
    ++seq->main.rx_next;
    seq->main.rx_debt += length + (UCP_FAILOVER_SEQ_ACK_UNIT -
                                   UCP_FAILOVER_SEQ_HDR_LEN);
    return seq->am_cb[hdr->am_id](worker, data,
                                  length - UCP_FAILOVER_SEQ_HDR_LEN, flags);
}

/* ucp_failover_seq_handler_ep() of a message whose acknowledgement
 * releases more than ucp_failover_seq_release_fast() does */
static UCS_F_NOINLINE ucs_status_t
ucp_failover_seq_handler_release(ucp_worker_h worker, ucp_failover_seq_t *seq,
                                 void *data, size_t length, unsigned flags)
{
    const ucp_failover_seq_hdr_t *hdr =
            UCS_PTR_BYTE_OFFSET(data, length - UCP_FAILOVER_SEQ_HDR_LEN);

    ucp_failover_seq_release_upto(seq, &seq->main, hdr->ack);
    return ucp_failover_seq_deliver_usual(worker, seq, data, length, flags);
}

/*
 * The usual sequenced message, of endpoint @a ep: the next of its stream 0,
 * that owes no acknowledgement alone and has no held message behind it, of a
 * known id, on an endpoint already in the probe rounds. Everything is checked
 * before anything changes, and anything else takes the slow path, which
 * handles the message in full; the message goes to its handler last, as a
 * tail call, so that nothing lives across a call here and the frame stays
 * small (an acknowledgement that releases more than the stream's current
 * chunk is released out of line first). The stream's debt alone says whether
 * an acknowledgement would be owed alone after this message (its weight,
 * below ACK_BYTES) and whether messages are held back (RX_HELD, above). The
 * trailer is read where it is, as the fields are needed.
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
ucp_failover_seq_handler_ep(ucp_worker_h worker, ucp_ep_h ep, void *data,
                            size_t length, unsigned flags)
{
    const ucp_failover_seq_hdr_t *hdr =
            UCS_PTR_BYTE_OFFSET(data, length - UCP_FAILOVER_SEQ_HDR_LEN);
    ucp_ep_ext_control_t *ext         = ucp_ep_ext_gen(ep)->control_ext;
    ucp_failover_seq_t *seq;
    ucp_failover_ep_t *fo;

    /* (the control extension is read without ucp_ep_ext_control()'s
     * assertion, whose call would give the fast path a frame) */
    if (ucs_unlikely(ext == NULL)) {
        goto slow;
    }

    fo  = ext->failover;
    seq = fo->seq;
    if (ucs_unlikely((seq == NULL) || (hdr->sn != seq->main.rx_next) ||
                     !(fo->flags & UCP_FAILOVER_EP_FLAG_ROUND) ||
                     ((seq->main.rx_debt + length) >=
                      (UCP_FAILOVER_SEQ_ACK_BYTES + UCP_FAILOVER_SEQ_HDR_LEN -
                       UCP_FAILOVER_SEQ_ACK_UNIT)) ||
                     (seq->am_cb[hdr->am_id] == NULL))) {
        /* (an id not of am_ids is dropped there, with a message) */
        goto slow;
    }

    if (ucs_unlikely(!ucp_failover_seq_release_fast(seq, &seq->main,
                                                    hdr->ack))) {
        return ucp_failover_seq_handler_release(worker, seq, data, length,
                                                flags);
    }

    return ucp_failover_seq_deliver_usual(worker, seq, data, length, flags);

slow:
    return ucp_failover_seq_handler_slow(worker, data, length, flags);
}

/* ucp_failover_seq_handler() of an endpoint id that the worker's map keeps
 * (an endpoint with error handling) */
static UCS_F_NOINLINE ucs_status_t
ucp_failover_seq_handler_indirect(ucp_worker_h worker, void *data,
                                  size_t length, unsigned flags)
{
    ucp_failover_seq_hdr_t hdr;
    ucp_ep_h ep;

    memcpy(&hdr, UCS_PTR_BYTE_OFFSET(data, length - UCP_FAILOVER_SEQ_HDR_LEN),
           sizeof(hdr));
    if (ucp_worker_get_ep_by_id(worker, hdr.ep_id, &ep) != UCS_OK) {
        return ucp_failover_seq_handler_slow(worker, data, length, flags);
    }

    return ucp_failover_seq_handler_ep(worker, ep, data, length, flags);
}

/* The trailer's flags and stream, read as one word, of a message the fast
 * path does not take: an acknowledgement alone, or one asked for, or another
 * stream than 0 */
#define UCP_FAILOVER_SEQ_SLOW_FLAGS \
    (UCP_FAILOVER_SEQ_FLAG_ACK_ONLY | UCP_FAILOVER_SEQ_FLAG_ACK_REQ)
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#  define UCP_FAILOVER_SEQ_SLOW_MASK (UCP_FAILOVER_SEQ_SLOW_FLAGS | 0xff00)
#elif __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#  define UCP_FAILOVER_SEQ_SLOW_MASK ((UCP_FAILOVER_SEQ_SLOW_FLAGS << 8) | 0xff)
#else
#  error "unknown byte order"
#endif

/*
 * A sequenced message. The usual one (ucp_failover_seq_handler_ep()) is
 * delivered here; anything else takes the slow path (ucp_failover_seq_rx),
 * which handles it in full.
 */
static ucs_status_t
ucp_failover_seq_handler(void *arg, void *data, size_t length, unsigned flags)
{
    ucp_worker_h worker = arg;
    const ucp_failover_seq_hdr_t *hdr;
    uint16_t flags_stream;
    ucp_ep_h ep;

    if (ucs_unlikely(length < UCP_FAILOVER_SEQ_HDR_LEN)) {
        goto slow;
    }

    /* the trailer is read in place (packed), field by field as needed:
     * fewer registers than a copy; its flags and stream in one word */
    hdr = UCS_PTR_BYTE_OFFSET(data, length - UCP_FAILOVER_SEQ_HDR_LEN);
    UCS_STATIC_ASSERT(ucs_offsetof(ucp_failover_seq_hdr_t, stream) ==
                      (ucs_offsetof(ucp_failover_seq_hdr_t, flags) + 1));
    memcpy(&flags_stream, &hdr->flags, sizeof(flags_stream));
    if (ucs_unlikely((flags_stream & UCP_FAILOVER_SEQ_SLOW_MASK) ||
                     (hdr->ep_id == UCS_PTR_MAP_KEY_INVALID))) {
        goto slow;
    } else if (ucs_unlikely(ucs_ptr_map_key_indirect(hdr->ep_id))) {
        return ucp_failover_seq_handler_indirect(worker, data, length, flags);
    }

    /* a direct id is the endpoint's address */
    ep = (ucp_ep_h)hdr->ep_id;
    if (ucs_unlikely(ep->worker != worker)) {
        goto slow;
    }

    return ucp_failover_seq_handler_ep(worker, ep, data, length, flags);

slow:
    return ucp_failover_seq_handler_slow(worker, data, length, flags);
}

static void ucp_failover_seq_dump(ucp_worker_h worker,
                                  uct_am_trace_type_t type, uint8_t id,
                                  const void *data, size_t length,
                                  char *buffer, size_t max)
{
    ucp_failover_seq_hdr_t hdr;

    if (length < sizeof(hdr)) {
        snprintf(buffer, max, "FAILOVER_SEQ (%zu bytes)", length);
        return;
    }

    memcpy(&hdr, UCS_PTR_BYTE_OFFSET(data, length - sizeof(hdr)), sizeof(hdr));
    snprintf(buffer, max, "FAILOVER_SEQ ep 0x%" PRIx64 " stream %u sn %u ack "
             "%u id %d flags 0x%x", hdr.ep_id, hdr.stream, hdr.sn, hdr.ack,
             hdr.am_id, hdr.flags);
}

UCP_DEFINE_AM(UINT64_MAX, UCP_AM_ID_FAILOVER_SEQ, ucp_failover_seq_handler,
              ucp_failover_seq_dump, 0);

uint32_t ucp_failover_seq_rx_expected(ucp_ep_h ep)
{
    return ucp_failover_seq_stream_rx_expected(ep, 0);
}

uint32_t ucp_failover_seq_stream_rx_expected(ucp_ep_h ep, uint8_t stream)
{
    ucp_failover_seq_stream_t *st = ucp_failover_seq_stream_find(ep, stream);

    return (st == NULL) ? 0 : st->rx_next;
}
