/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * Sequencing, the sender: every message UCP sends through a sequencing
 * endpoint is numbered, retained until the peer acknowledges it (within
 * UCX_MULTIRAIL_RETAIN, counted by the buffers that hold the copies) and
 * handed to the transport, or to the backlog when the transport has no
 * room; the sequencing endpoint itself (a UCP proxy endpoint) and its
 * pending queue. The overview is in ucp_failover_seq.c.
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
#include <pthread.h>


static uct_iface_ops_t ucp_failover_seq_ep_ops;


/* ---------------------------------------------------------------------------
 * State
 */

static void ucp_failover_seq_stream_init(ucp_failover_seq_stream_t *st,
                                         uint8_t id)
{
    st->id      = id;
    st->tx_next = 1;
    st->rx_next = 1;
    ucs_queue_head_init(&st->retained);
    ucs_list_head_init(&st->held);
}

/* The active message ids a sequenced message may be delivered to */
uint64_t ucp_failover_seq_am_ids(ucp_context_h context)
{
    uint64_t am_ids = 0;
    unsigned id;

    UCS_STATIC_ASSERT(UCP_AM_ID_LAST <= 64);
    for (id = UCP_AM_ID_FIRST; id < UCP_AM_ID_LAST; ++id) {
        if ((id != UCP_AM_ID_FAILOVER) && (id != UCP_AM_ID_FAILOVER_SEQ) &&
            (ucp_am_handlers[id] != NULL) &&
            (ucp_am_handlers[id]->cb != NULL) &&
            (context->config.features & ucp_am_handlers[id]->features)) {
            am_ids |= UCS_BIT(id);
        }
    }

    return am_ids;
}

/*
 * The handlers by id of sequenced messages, for the receipt's fast path: the
 * handler of an id of @a am_ids (ucp_failover_seq_am_ids()), NULL for any
 * other id. One table per set of ids (per set of the contexts' features),
 * shared by the workers of every context, and never freed: an endpoint may
 * outlive its worker's failover state. More sets than tables (not seen:
 * a process has few contexts) get the empty table, and their messages the
 * slow path, which checks am_ids.
 */
#define UCP_FAILOVER_SEQ_AM_TABLES 4

static const uct_am_callback_t *ucp_failover_seq_am_cb(uint64_t am_ids)
{
    static const uct_am_callback_t none[UINT8_MAX + 1];
    static struct {
        uint64_t          am_ids;
        uct_am_callback_t cb[UINT8_MAX + 1];
    } tables[UCP_FAILOVER_SEQ_AM_TABLES];
    static unsigned count;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    const uct_am_callback_t *table = none;
    unsigned i, id;

    pthread_mutex_lock(&lock);
    for (i = 0; i < count; ++i) {
        if (tables[i].am_ids == am_ids) {
            table = tables[i].cb;
            goto out;
        }
    }

    if (count < UCP_FAILOVER_SEQ_AM_TABLES) {
        tables[count].am_ids = am_ids;
        ucs_for_each_bit(id, am_ids) {
            tables[count].cb[id] = ucp_am_handlers[id]->cb;
        }
        table = tables[count++].cb;
    } else {
        ucs_diag("more than %d sets of active message ids: sequenced "
                 "messages of ids 0x%" PRIx64 " take the slow path",
                 UCP_FAILOVER_SEQ_AM_TABLES, am_ids);
    }

out:
    pthread_mutex_unlock(&lock);
    return table;
}

ucp_failover_seq_t *ucp_failover_seq_create(ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    ucp_failover_seq_t *seq;

    ucs_assert(fo->seq == NULL);
    seq = ucs_calloc(1, sizeof(*seq), "failover_seq");
    if (seq == NULL) {
        ucs_error("ep %p: no memory for the sequencing state", ep);
        return NULL;
    }

    seq->ep     = ep;
    seq->am_ids = ucp_failover_seq_am_ids(ep->worker->context);
    seq->am_cb  = ucp_failover_seq_am_cb(seq->am_ids);
    ucp_failover_seq_stream_init(&seq->main, 0);
    seq->streams[0] = &seq->main;
    seq->retain     = ep->worker->context->config.ext.multirail.retain;
    seq->pool       = (ep->worker->failover != NULL) ?
                      ep->worker->failover->pool : NULL;
    ucp_failover_pool_ref(seq->pool);
    ucs_queue_head_init(&seq->refs_done);
    seq->refs_done_id = UCS_CALLBACKQ_ID_NULL;
    fo->seq           = seq;
    return seq;
}

/* Data stream @a id, created on first use (NULL: no memory) */
ucp_failover_seq_stream_t *
ucp_failover_seq_stream_get(ucp_failover_seq_t *seq, uint8_t id)
{
    ucp_failover_seq_stream_t *st;

    ucs_assert(id < UCP_FAILOVER_SEQ_STREAMS);
    if (seq->streams[id] != NULL) {
        return seq->streams[id];
    }

    st = ucs_calloc(1, sizeof(*st), "failover_seq_stream");
    if (st == NULL) {
        ucs_error("ep %p: no memory for sequencing stream %u", seq->ep, id);
        return NULL;
    }

    ucp_failover_seq_stream_init(st, id);
    seq->streams[id] = st;
    return st;
}

int ucp_failover_seq_ep_test(uct_ep_h uct_ep)
{
    return (uct_ep != NULL) &&
           (uct_ep->iface->ops.ep_destroy ==
            ucp_failover_seq_ep_ops.ep_destroy);
}

int ucp_failover_seq_is_owner(uct_ep_h uct_ep, uct_ep_h owned_ep)
{
    return ucp_failover_seq_ep_test(uct_ep) &&
           (ucp_failover_seq_tl_ep(ucs_derived_of(uct_ep,
                                                  ucp_failover_seq_ep_t)) ==
            owned_ep);
}

/* ---------------------------------------------------------------------------
 * Retention
 */

static void ucp_failover_seq_comp_cb(uct_completion_t *self)
{
    ucp_failover_seq_entry_t *entry = ucs_container_of(self,
                                                       ucp_failover_seq_entry_t,
                                                       comp);

    /* an error needs nothing: the copy is kept until acknowledged, and the
     * lane's failover sends it again */
    if ((entry->comp.count == 0) && (entry->seq == NULL)) {
        ucp_failover_seq_entry_free(entry);
    }
}

/* A new chunk for @a st's small messages: its current one is full */
static UCS_F_NOINLINE ucp_failover_seq_chunk_t *
ucp_failover_seq_chunk_new(ucp_failover_seq_t *seq,
                           ucp_failover_seq_stream_t *st)
{
    ucp_failover_seq_chunk_t *chunk, *old = st->chunk;
    size_t held;

    chunk = ucp_failover_pool_get(seq->pool, UCP_FAILOVER_SEQ_CHUNK_SIZE,
                                  &held);
    if (ucs_unlikely(chunk == NULL)) {
        return NULL;
    }

    chunk->seq     = seq;
    chunk->st      = st;
    chunk->used    = 0;
    chunk->size    = held - sizeof(*chunk);
    chunk->fast_end = chunk->size - UCP_FAILOVER_SEQ_FAST_ENTRY_MAX;
    chunk->live    = 0;
    chunk->held    = held;
    chunk->current = 1;
    st->chunk      = chunk;
    st->retained_bytes  += held;
    seq->retained_bytes += held;
    st->retained_max     = ucs_max(st->retained_max, st->retained_bytes);
    ucp_failover_seq_held_changed(seq);

    if (old != NULL) {
        /* its last entry gives it back */
        old->current = 0;
        if (old->live == 0) {
            ucp_failover_seq_chunk_release(old);
        }
    }

    return chunk;
}

void ucp_failover_seq_chunk_detach(ucp_failover_seq_chunk_t *chunk)
{
    ucp_failover_seq_stream_t *st = chunk->st;

    if (st == NULL) {
        return;
    }

    if (chunk->current) {
        chunk->current = 0;
        st->chunk      = NULL;
    }

    st->retained_bytes         -= chunk->held;
    chunk->seq->retained_bytes -= chunk->held;
    ucp_failover_seq_held_changed(chunk->seq);

    chunk->st  = NULL;
    chunk->seq = NULL;
}

void ucp_failover_seq_chunk_release(ucp_failover_seq_chunk_t *chunk)
{
    ucp_failover_seq_stream_t *st = chunk->st;
    ucp_failover_seq_t *seq       = chunk->seq;

    ucs_assert(chunk->live == 0);
    if (st != NULL) {
        if (chunk->current) {
            st->chunk = NULL;
        }
        st->retained_bytes  -= chunk->held;
        seq->retained_bytes -= chunk->held;
        ucp_failover_seq_held_changed(seq);
    }

    /* (a release of entries checks the window after it) */
    ucp_failover_pool_put(chunk, chunk->held);
}

/* A place of @a size bytes (aligned) in @a chunk, which has room for it */
static UCS_F_ALWAYS_INLINE ucp_failover_seq_entry_t *
ucp_failover_seq_chunk_entry(ucp_failover_seq_t *seq,
                             ucp_failover_seq_chunk_t *chunk, size_t size)
{
    ucp_failover_seq_entry_t *entry;

    entry             = (ucp_failover_seq_entry_t*)(chunk->data + chunk->used);
    chunk->used      += size;
    ++chunk->live;
    entry->chunk      = chunk;
    entry->held       = 0;
    entry->comp.count = 0;
    entry->seq        = seq;
    return entry;
}

/* The size of the place in a chunk of a message of @a length bytes */
static UCS_F_ALWAYS_INLINE size_t ucp_failover_seq_entry_size(size_t length)
{
    return ucs_offsetof(ucp_failover_seq_entry_t, data) + length +
           UCP_FAILOVER_SEQ_HDR_LEN;
}

/* A retained entry for a message of @a length bytes of @a st (the trailer
 * comes on top): a place in the stream's chunk, or a buffer of what the
 * length needs from the worker's pool; no malloc */
static UCS_F_ALWAYS_INLINE ucp_failover_seq_entry_t *
ucp_failover_seq_entry_alloc(ucp_failover_seq_t *seq,
                             ucp_failover_seq_stream_t *st, size_t length)
{
    size_t size = ucp_failover_seq_entry_size(length);
    ucp_failover_seq_chunk_t *chunk;
    ucp_failover_seq_entry_t *entry;
    size_t held;

    if (ucs_likely(size <= UCP_FAILOVER_SEQ_CHUNK_ENTRY_MAX)) {
        size  = ucs_align_up_pow2(size, 8);
        chunk = st->chunk;
        if (ucs_unlikely((chunk == NULL) ||
                         ((chunk->used + size) > chunk->size))) {
            chunk = ucp_failover_seq_chunk_new(seq, st);
            if (ucs_unlikely(chunk == NULL)) {
                return NULL;
            }
        }

        return ucp_failover_seq_chunk_entry(seq, chunk, size);
    }

    entry = ucp_failover_pool_get(seq->pool, size, &held);
    if (ucs_unlikely(entry == NULL)) {
        return NULL;
    }

    entry->chunk      = NULL;
    entry->held       = held;
    entry->flags      = 0;
    entry->comp.count = 0;
    entry->seq        = seq;
    return entry;
}

/* ---------------------------------------------------------------------------
 * Messages without data: acknowledgements, and requests for them
 */

ucs_status_t
ucp_failover_seq_send_ack_flags(ucp_failover_seq_t *seq,
                                ucp_failover_seq_stream_t *st, uint8_t flags,
                                uint32_t sn)
{
    ucp_ep_h ep = seq->ep;
    ucp_failover_seq_hdr_t hdr;
    ucp_lane_index_t am_lane;
    ucs_status_t status;
    uct_ep_h uct_ep;

    am_lane = ucp_ep_get_am_lane(ep);
    if (!(ep->flags & UCP_EP_FLAG_REMOTE_ID) || (am_lane == UCP_NULL_LANE) ||
        (ep->flags & UCP_EP_FLAG_FAILED)) {
        return UCS_ERR_NOT_CONNECTED;
    }

    uct_ep = ep->uct_eps[am_lane];
    if (ucp_failover_seq_ep_test(uct_ep)) {
        uct_ep = ucp_failover_seq_tl_ep(ucs_derived_of(uct_ep,
                                                       ucp_failover_seq_ep_t));
    } else if ((uct_ep == NULL) || (uct_ep == &ucp_failed_tl_ep) ||
               ucp_wireup_ep_test(uct_ep)) {
        return UCS_ERR_NOT_CONNECTED;
    }

    hdr.ep_id  = ucp_ep_remote_id(ep);
    hdr.sn     = sn;
    hdr.ack    = ucp_failover_seq_rx_delivered(st);
    hdr.am_id  = 0;
    hdr.flags  = UCP_FAILOVER_SEQ_FLAG_ACK_ONLY | flags;
    hdr.stream = st->id;
    status     = uct_ep_am_short(uct_ep, UCP_AM_ID_FAILOVER_SEQ, hdr.ep_id,
                                 UCS_PTR_BYTE_OFFSET(&hdr, sizeof(hdr.ep_id)),
                                 sizeof(hdr) - sizeof(hdr.ep_id));
    if (status == UCS_OK) {
        ucp_failover_seq_ack_sent(st, hdr.ack);
        ++st->acks_sent;
    } else {
        ++st->acks_unsent;
        st->ack_status = status;
    }

    return status;
}

/* Ask the peer to acknowledge stream @a st up to everything sent, at once
 * or as soon as it has delivered that far (an acknowledgement alone of what
 * we received in it, with ACK_REQ and the number wanted in 'sn'): messages
 * sent by reference wait for it, and none that asks is on its way. Until
 * the request is sent, each probe round tries again. */
void ucp_failover_seq_ask_ack(ucp_failover_seq_t *seq,
                              ucp_failover_seq_stream_t *st)
{
    if (ucp_failover_seq_send_ack_flags(seq, st, UCP_FAILOVER_SEQ_FLAG_ACK_REQ,
                                        st->tx_next - 1) == UCS_OK) {
        st->ack_asked    = 1;
        st->ack_asked_sn = st->tx_next - 1;
    } else {
        ucp_failover_round_want(ucp_failover_ep(seq->ep));
    }
}

/* ---------------------------------------------------------------------------
 * Messages sent by reference
 */

/* @a st retains @a delta bytes more (negative: fewer) in buffers of its
 * own */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_held_add(ucp_failover_seq_t *seq,
                          ucp_failover_seq_stream_t *st, ssize_t delta)
{
    st->retained_bytes  += delta;
    seq->retained_bytes += delta;
    st->retained_max     = ucs_max(st->retained_max, st->retained_bytes);
    ucp_failover_seq_held_changed(seq);
}


/* Copy a UCT iov array to @a dest (UCP passes contiguous elements) */
static void ucp_failover_seq_iov_copy(void *dest, const uct_iov_t *iov,
                                      size_t iovcnt, size_t length)
{
    ucs_iov_iter_t iter;

    ucs_iov_iter_init(&iter);
    uct_iov_to_buffer(iov, iovcnt, &iter, dest, length);
}


void ucp_failover_seq_ref_free(ucp_failover_seq_entry_t *entry)
{
    ucp_failover_seq_ref_t *ref = ucp_failover_seq_entry_ref(entry);
    uct_completion_t *user_comp = ref->user_comp;
    ucs_status_t status         = ref->status;

    ucp_failover_pool_put(entry, entry->held);
    if (user_comp != NULL) {
        uct_invoke_completion(user_comp, status);
    }
}

/* The hold of an entry sent by reference that left its stream's retention
 * (ucp_failover_seq_ref_leave) ends: with the last, its user's request
 * completes */
static void ucp_failover_seq_ref_unhold(ucp_failover_seq_entry_t *entry)
{
    if (--entry->comp.count == 0) {
        ucp_failover_seq_ref_free(entry);
    }
}

/* The users' requests of the entries in seq->refs_done complete, from
 * progress */
static unsigned ucp_failover_seq_refs_done_progress(void *arg)
{
    ucp_failover_seq_t *seq = arg;
    ucp_worker_h worker     = seq->ep->worker;
    ucp_failover_seq_entry_t *entry;
    ucs_queue_head_t done;

    UCS_ASYNC_BLOCK(&worker->async);
    seq->refs_done_id = UCS_CALLBACKQ_ID_NULL;
    ucs_queue_head_init(&done);
    ucs_queue_splice(&done, &seq->refs_done);
    /* (a user's callback may destroy the endpoint: nothing of it is used
     * after the first) */
    ucs_queue_for_each_extract(entry, &done, queue, 1) {
        ucp_failover_seq_ref_unhold(entry);
    }
    UCS_ASYNC_UNBLOCK(&worker->async);
    return 1;
}

void ucp_failover_seq_refs_flush(ucp_failover_seq_t *seq)
{
    ucp_failover_seq_entry_t *entry;

    uct_worker_progress_unregister_safe(seq->ep->worker->uct,
                                        &seq->refs_done_id);
    ucs_queue_for_each_extract(entry, &seq->refs_done, queue, 1) {
        ucp_failover_seq_ref_unhold(entry);
    }
}

/*
 * An entry sent by reference has left its stream's retention (and its
 * count): its user's request completes with @a status when no transport
 * reads the user's data any more (ucp_failover_seq_comp_cb() then frees
 * it), and never from inside this call: the request completes from progress
 * (a user's callback may send on the endpoint, whose state the caller may be
 * in the middle of changing). The entry holds one count until then.
 */
static void ucp_failover_seq_ref_leave(ucp_failover_seq_t *seq,
                                       ucp_failover_seq_entry_t *entry,
                                       ucs_status_t status)
{
    ucp_worker_h worker = seq->ep->worker;

    ucp_failover_seq_entry_ref(entry)->status = status;
    entry->seq                                = NULL;
    if (entry->comp.count != 0) {
        return;
    }

    ++entry->comp.count;
    ucs_queue_push(&seq->refs_done, &entry->queue);
    uct_worker_progress_register_safe(worker->uct,
                                      ucp_failover_seq_refs_done_progress, seq,
                                      UCS_CALLBACKQ_FLAG_ONESHOT,
                                      &seq->refs_done_id);
    ucp_worker_signal_internal(worker);
}

/* An entry sent by reference leaves @a st's retention (already unlinked from
 * its queue) */
static void ucp_failover_seq_ref_unretain(ucp_failover_seq_t *seq,
                                          ucp_failover_seq_stream_t *st,
                                          ucp_failover_seq_entry_t *entry)
{
    ucp_failover_seq_held_add(seq, st, -(ssize_t)entry->held);
    --st->refs;
}

/* A copy of the message of @a entry, sent by reference, as an ordinary
 * retained entry with the same number (counted in the retention), or NULL:
 * no memory */
static ucp_failover_seq_entry_t *
ucp_failover_seq_ref_copy(ucp_failover_seq_t *seq,
                          ucp_failover_seq_stream_t *st,
                          ucp_failover_seq_entry_t *entry)
{
    ucp_failover_seq_ref_t *ref = ucp_failover_seq_entry_ref(entry);
    size_t header_length        = entry->length - UCP_FAILOVER_SEQ_HDR_LEN;
    size_t payload              = uct_iov_total_length(ref->iov, ref->iovcnt);
    ucp_failover_seq_entry_t *copy;

    copy = ucp_failover_seq_entry_alloc(seq, st, header_length + payload);
    if (copy == NULL) {
        return NULL;
    }

    memcpy(copy->data, entry->data, header_length);
    ucp_failover_seq_iov_copy(copy->data + header_length, ref->iov,
                              ref->iovcnt, payload);
    memcpy(copy->data + header_length + payload, entry->data + header_length,
           UCP_FAILOVER_SEQ_HDR_LEN);
    copy->sn     = entry->sn;
    copy->length = header_length + payload + UCP_FAILOVER_SEQ_HDR_LEN;
    if (copy->held != 0) {
        ucp_failover_seq_held_add(seq, st, copy->held);
    }

    return copy;
}

/*
 * The messages of @a st sent by reference that are retained are copied, to
 * be sent again on a lane that cannot send them by reference (the user's
 * memory handle is of the old lane's domain), and their users' requests
 * complete: the copies take their places in the retention, while it holds
 * less than its bound (the rest stay as they are, and wait). The stream's
 * oldest message, when it is the next to send, is copied whatever the bound:
 * nothing of the stream is on its way then whose acknowledgement would make
 * room, and the messages queued behind it may hold all of it (at most one
 * message per stream over the bound, until the peer acknowledges it). With
 * @a drop_status an error, they are dropped instead (the endpoint failed)
 * and their requests complete with it. The failure path only.
 */
static void ucp_failover_seq_stream_own(ucp_failover_seq_t *seq,
                                        ucp_failover_seq_stream_t *st,
                                        ucs_status_t drop_status)
{
    ucp_failover_seq_entry_t *entry, *copy;
    ucs_queue_head_t retained, refs;
    int unsent_dropped = 0;
    uint32_t unsent_sn = 0;
    int full;

    if (st->refs == 0) {
        return;
    }

    ucs_queue_head_init(&retained);
    ucs_queue_head_init(&refs);
    ucs_queue_for_each_extract(entry, &st->retained, queue, 1) {
        copy = NULL;
        full = (seq->retained_bytes >= seq->retain) &&
               ((entry != st->unsent) || !ucs_queue_is_empty(&retained));
        if ((entry->chunk != NULL) ||
            !(entry->flags & UCP_FAILOVER_SEQ_ENTRY_REF) ||
            ((drop_status == UCS_OK) &&
             (full || ((copy = ucp_failover_seq_ref_copy(seq, st, entry)) ==
                       NULL)))) {
            ucs_queue_push(&retained, &entry->queue);
            continue;
        }

        if (st->unsent == entry) {
            unsent_dropped = (copy == NULL);
            unsent_sn      = entry->sn;
            ucp_failover_seq_unsent_set(st, copy);
        }

        if (copy != NULL) {
            ++st->tx_ref_copies;
            ucs_queue_push(&retained, &copy->queue);
        }

        ucp_failover_seq_ref_unretain(seq, st, entry);
        ucs_queue_push(&refs, &entry->queue);
    }

    ucs_queue_splice(&st->retained, &retained);
    if (unsent_dropped) {
        /* the first unsent one was dropped: the next one is */
        ucs_queue_for_each(entry, &st->retained, queue) {
            if ((int32_t)(entry->sn - unsent_sn) > 0) {
                ucp_failover_seq_unsent_set(st, entry);
                break;
            }
        }
    }

    ucs_queue_for_each_extract(entry, &refs, queue, 1) {
        ucp_failover_seq_ref_leave(seq, entry, drop_status);
    }
}

/* The general case of ucp_failover_seq_release(): several messages, or one
 * a zero-copy send reads, with a buffer of its own, waiting to be sent
 * again, or a window to check */
void ucp_failover_seq_release_upto(ucp_failover_seq_t *seq,
                                   ucp_failover_seq_stream_t *st,
                                   uint32_t ack)
{
    ucp_failover_seq_entry_t *entry;

    st->tx_acked = ack;
    if ((int32_t)(ack - st->ack_asked_sn) >= 0) {
        /* the request for an acknowledgement is answered */
        st->ack_asked = 0;
    }
    while (!ucs_queue_is_empty(&st->retained)) {
        entry = ucs_queue_head_elem_non_empty(&st->retained,
                                              ucp_failover_seq_entry_t, queue);
        if ((int32_t)(ack - entry->sn) < 0) {
            break;
        }

        if (ucs_unlikely(entry == st->unsent)) {
            /* waiting to be sent again after a failover, but the peer has it
             * (sent on the old lane): no need to */
            ucp_failover_seq_unsent_set(st,
                                        ucp_failover_seq_next(st, entry));
        }

        ucs_queue_pull_non_empty(&st->retained);
        if (ucs_unlikely(entry->held != 0)) {
            ucp_failover_seq_held_add(seq, st, -(ssize_t)entry->held);
            if (entry->flags & UCP_FAILOVER_SEQ_ENTRY_REF) {
                /* its user's request completes (from progress) */
                --st->refs;
                ucp_failover_seq_ref_leave(seq, entry, UCS_OK);
                continue;
            }
        }

        if (ucs_likely(entry->comp.count == 0)) {
            ucp_failover_seq_entry_free(entry);
        } else {
            entry->seq = NULL; /* its completion frees it */
            if (entry->chunk != NULL) {
                ucp_failover_seq_chunk_detach(entry->chunk);
            }
        }
    }

    if (ucs_unlikely(seq->window_full)) {
        ucp_failover_seq_window_check(seq);
    }

    /* messages sent by reference after the one that asked wait for an
     * acknowledgement too (those not sent yet ask when they go) */
    if (ucs_unlikely(st->refs != 0) && !st->ack_asked &&
        (st->unsent == NULL)) {
        ucp_failover_seq_ask_ack(seq, st);
    }
}

/* Wrappers that wait for room in the retention move on if there is some */
void ucp_failover_seq_window_check(ucp_failover_seq_t *seq)
{
    ucp_failover_seq_stream_t *st;
    uint8_t id;

    if (seq->retained_bytes >= seq->retain) {
        return;
    }

    seq->window_full = 0;
    for (id = 0; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        st = seq->streams[id];
        if ((st != NULL) && (st->seq_ep != NULL) && st->seq_ep->window_full) {
            st->seq_ep->window_full = 0;
            ucp_failover_seq_dispatch_schedule(st->seq_ep);
        }
    }
}

/* ---------------------------------------------------------------------------
 * Sending
 */

/*
 * The acknowledgement a message @a seq_ep sends carries (of stream 0: the
 * current one, also when the message is sent again). Sent on the am lane,
 * it counts as sent; a data lane's copy may be lost with that lane (which
 * then fails without moving the am lane), so it does not count.
 */
static UCS_F_ALWAYS_INLINE uint32_t
ucp_failover_seq_ack_give(ucp_failover_seq_ep_t *seq_ep)
{
    ucp_failover_seq_t *seq = seq_ep->seq;
    uint32_t ack            = ucp_failover_seq_rx_delivered(&seq->main);

    if (ucs_likely(seq_ep == seq->seq_ep)) {
        ucp_failover_seq_ack_sent(&seq->main, ack);
    }

    return ack;
}

/* ucp_failover_seq_ack_give(), and the message's flags: a request for an
 * acknowledgement (about the message's own stream @a st) while messages are
 * to ask for one */
static UCS_F_ALWAYS_INLINE uint8_t
ucp_failover_seq_ack_take(ucp_failover_seq_ep_t *seq_ep,
                          ucp_failover_seq_stream_t *st, uint32_t sn,
                          uint32_t *ack_p)
{
    ucp_failover_seq_t *seq = seq_ep->seq;

    *ack_p = ucp_failover_seq_ack_give(seq_ep);

    /* once per acknowledgement: a request on every message past the half
     * would have the receiver send an acknowledgement per message */
    if (ucs_likely(!seq->ack_req_due) || st->ack_asked) {
        return 0;
    }

    st->ack_asked    = 1;
    st->ack_asked_sn = sn;
    return UCP_FAILOVER_SEQ_FLAG_ACK_REQ;
}

/* Refresh the acknowledgement and flags of a retained message's trailer
 * before it is sent (again) */
static void ucp_failover_seq_hdr_fill(ucp_failover_seq_ep_t *seq_ep,
                                      ucp_failover_seq_stream_t *st,
                                      ucp_failover_seq_entry_t *entry)
{
    ucp_failover_seq_hdr_t *hdr = UCS_PTR_BYTE_OFFSET(entry->data,
                                                      entry->length -
                                                      UCP_FAILOVER_SEQ_HDR_LEN);
    uint8_t flags, old_flags;
    uint32_t ack;

    if (entry->comp.count > 0) {
        /* a zero-copy send of it is still reading it */
        return;
    }

    /* a request for an acknowledgement written when the transport did not
     * take the message stays: it is the stream's one (ack_asked) */
    memcpy(&old_flags, &hdr->flags, sizeof(old_flags));
    flags = ucp_failover_seq_ack_take(seq_ep, st, entry->sn, &ack) |
            (old_flags & UCP_FAILOVER_SEQ_FLAG_ACK_REQ);
    memcpy(&hdr->ack, &ack, sizeof(ack));
    memcpy(&hdr->flags, &flags, sizeof(flags));
}

static size_t ucp_failover_seq_pack_entry(void *dest, void *arg)
{
    ucp_failover_seq_entry_t *entry = arg;

    memcpy(dest, entry->data, entry->length);
    return entry->length;
}

/* ucp_failover_seq_tl_post() of a message larger than the transport's short
 * one (out of line: the path of every short message stays small) */
static UCS_F_NOINLINE ucs_status_t
ucp_failover_seq_tl_post_large(ucp_failover_seq_ep_t *seq_ep,
                               ucp_failover_seq_entry_t *entry)
{
    uct_ep_h tl_ep = ucp_failover_seq_tl_ep(seq_ep);
    ucs_status_t status;
    uct_iov_t iov;
    ssize_t packed;

    if (entry->length <= seq_ep->max_bcopy) {
        packed = uct_ep_am_bcopy(tl_ep, UCP_AM_ID_FAILOVER_SEQ,
                                 ucp_failover_seq_pack_entry, entry, 0);
        return (packed < 0) ? (ucs_status_t)packed : UCS_OK;
    }

    if (ucs_unlikely((entry->chunk != NULL) && entry->chunk->current)) {
        /* a chunk a zero-copy send reads is not its stream's current one
         * any more: ucp_failover_seq_release_fast() empties that one */
        entry->chunk->current   = 0;
        entry->chunk->st->chunk = NULL;
    }

    iov.buffer = entry->data;
    iov.length = entry->length;
    iov.memh   = UCT_MEM_HANDLE_NULL;
    iov.stride = 0;
    iov.count  = 1;
    if (entry->comp.count == 0) {
        entry->comp.func   = ucp_failover_seq_comp_cb;
        entry->comp.status = UCS_OK;
    }
    ++entry->comp.count;
    status = uct_ep_am_zcopy(tl_ep, UCP_AM_ID_FAILOVER_SEQ, NULL, 0, &iov, 1,
                             0, &entry->comp);
    if (status != UCS_INPROGRESS) {
        --entry->comp.count;
    }

    return status;
}

/* Hand a message sent by reference, its trailer filled, to the transport
 * endpoint of @a seq_ep with zero copy: the header from the entry, the
 * user's data in place, then the trailer from the entry */
static ucs_status_t
ucp_failover_seq_tl_post_ref(ucp_failover_seq_ep_t *seq_ep,
                             ucp_failover_seq_entry_t *entry)
{
    ucp_failover_seq_ref_t *ref = ucp_failover_seq_entry_ref(entry);
    ucs_status_t status;

    if (entry->comp.count == 0) {
        entry->comp.func   = ucp_failover_seq_comp_cb;
        entry->comp.status = UCS_OK;
    }
    ++entry->comp.count;
    status = uct_ep_am_zcopy(ucp_failover_seq_tl_ep(seq_ep),
                             UCP_AM_ID_FAILOVER_SEQ, entry->data,
                             entry->length - UCP_FAILOVER_SEQ_HDR_LEN,
                             ref->iov, ref->iovcnt + 1, ref->send_flags,
                             &entry->comp);
    if (status != UCS_INPROGRESS) {
        --entry->comp.count;
    }

    return status;
}

/* Hand a retained message, its trailer filled, to the transport endpoint of
 * @a seq_ep */
static UCS_F_ALWAYS_INLINE ucs_status_t
ucp_failover_seq_tl_post(ucp_failover_seq_ep_t *seq_ep,
                         ucp_failover_seq_entry_t *entry)
{
    uint64_t header;

    if (ucs_likely(entry->length <= seq_ep->max_short)) {
        memcpy(&header, entry->data, sizeof(header));
        return uct_ep_am_short(ucp_failover_seq_tl_ep(seq_ep),
                               UCP_AM_ID_FAILOVER_SEQ, header,
                               entry->data + sizeof(header),
                               entry->length - sizeof(header));
    }

    return ucp_failover_seq_tl_post_large(seq_ep, entry);
}

/* Hand a retained message of @a st to the transport endpoint of @a seq_ep,
 * with the current acknowledgement */
static ucs_status_t ucp_failover_seq_tl_send(ucp_failover_seq_ep_t *seq_ep,
                                             ucp_failover_seq_stream_t *st,
                                             ucp_failover_seq_entry_t *entry)
{
    ucp_failover_seq_hdr_fill(seq_ep, st, entry);
    return ucp_failover_seq_tl_post(seq_ep, entry);
}

/* Send again a message of @a st sent by reference, the backlog's first
 * (*entry_p): by reference again if the wrapper's transport can (with no
 * memory handles if it needs none; else only on the memory domain the
 * user's handles are of: that of the lane it was sent on first), else as a
 * copy, which takes its place (*entry_p); UCS_ERR_NO_RESOURCE if
 * there is no memory for the copy (the backlog waits) */
static UCS_F_NOINLINE ucs_status_t
ucp_failover_seq_tl_send_ref(ucp_failover_seq_ep_t *seq_ep,
                             ucp_failover_seq_stream_t *st,
                             ucp_failover_seq_entry_t **entry_p)
{
    ucp_failover_seq_entry_t *entry = *entry_p;
    ucp_failover_seq_ref_t *ref     = ucp_failover_seq_entry_ref(entry);
    ucp_failover_seq_hdr_t *hdr     = UCS_PTR_BYTE_OFFSET(
            entry->data, entry->length - UCP_FAILOVER_SEQ_HDR_LEN);
    uint32_t i;

    if ((ref->iovcnt < seq_ep->ref_iov) &&
        ((seq_ep->ref_md == UCP_NULL_RESOURCE) ||
         (seq_ep->ref_md == ref->md))) {
        if (seq_ep->ref_md == UCP_NULL_RESOURCE) {
            for (i = 0; i <= ref->iovcnt; ++i) {
                ref->iov[i].memh = UCT_MEM_HANDLE_NULL;
            }
            ref->md = UCP_NULL_RESOURCE;
        }

        ucp_failover_seq_hdr_fill(seq_ep, st, entry);
        if (!st->ack_asked && (entry->comp.count == 0)) {
            /* a request for an acknowledgement may be lost with a lane */
            hdr->flags       |= UCP_FAILOVER_SEQ_FLAG_ACK_REQ;
            st->ack_asked     = 1;
            st->ack_asked_sn  = entry->sn;
        }
        return ucp_failover_seq_tl_post_ref(seq_ep, entry);
    }

    /* (the users' requests of the copies complete from progress: the
     * backlog this runs in stays as it is) */
    ucp_failover_seq_stream_own(seq_ep->seq, st, UCS_OK);
    entry = st->unsent;
    if ((entry->chunk == NULL) && (entry->flags & UCP_FAILOVER_SEQ_ENTRY_REF)) {
        /* (the backlog tries it again at every progress: said once) */
        if (!(entry->flags & UCP_FAILOVER_SEQ_ENTRY_WAIT_SAID)) {
            entry->flags |= UCP_FAILOVER_SEQ_ENTRY_WAIT_SAID;
            ucs_diag("ep %p: no room or memory to copy message %u:%u to send "
                     "it again, it waits", seq_ep->super.ucp_ep, st->id,
                     entry->sn);
        }
        seq_ep->mem_wait = 1;
        return UCS_ERR_NO_RESOURCE;
    }

    *entry_p = entry;
    return ucp_failover_seq_tl_send(seq_ep, st, entry);
}

/* Whether @a seq_ep has messages retained but not handed to the transport:
 * of its stream, and for the am lane's, of the orphaned data streams */
int ucp_failover_seq_has_backlog(ucp_failover_seq_ep_t *seq_ep)
{
    ucp_failover_seq_t *seq = seq_ep->seq;
    uint8_t id;

    if (seq_ep->stream->unsent != NULL) {
        return 1;
    }

    if (seq_ep->stream->id != 0) {
        return 0;
    }

    for (id = 1; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        if (ucp_failover_seq_orphan(seq->streams[id]) &&
            (seq->streams[id]->unsent != NULL)) {
            return 1;
        }
    }

    return 0;
}

/* Send the messages of @a st retained but not handed to the transport yet,
 * in order */
static ucs_status_t
ucp_failover_seq_send_stream_backlog(ucp_failover_seq_ep_t *seq_ep,
                                     ucp_failover_seq_stream_t *st)
{
    ucp_failover_seq_entry_t *entry;
    ucs_status_t status;

    while ((entry = st->unsent) != NULL) {
        if (ucs_unlikely((entry->chunk == NULL) &&
                         (entry->flags & UCP_FAILOVER_SEQ_ENTRY_REF))) {
            status = ucp_failover_seq_tl_send_ref(seq_ep, st, &entry);
        } else {
            status = ucp_failover_seq_tl_send(seq_ep, st, entry);
        }
        if (status == UCS_ERR_NO_RESOURCE) {
            return status;
        } else if (UCS_STATUS_IS_ERR(status)) {
            /* the lane is failing: its failover sends the backlog again */
            ucs_debug("ep %p: sequenced message %u:%u not sent: %s",
                      seq_ep->super.ucp_ep, st->id, entry->sn,
                      ucs_status_string(status));
            return status;
        }

        if (seq_ep->dead) {
            return UCS_ERR_CANCELED;
        }

        ucp_failover_seq_unsent_set(st, ucp_failover_seq_next(st, entry));
    }

    return UCS_OK;
}

/* The backlog of @a seq_ep: its stream's first (the order of stream 0), then
 * the orphaned data streams' */
static ucs_status_t ucp_failover_seq_send_backlog(ucp_failover_seq_ep_t *seq_ep)
{
    ucp_failover_seq_t *seq = seq_ep->seq;
    ucs_status_t status;
    uint8_t id;

    status = ucp_failover_seq_send_stream_backlog(seq_ep, seq_ep->stream);
    if ((status != UCS_OK) || (seq_ep->stream->id != 0)) {
        return status;
    }

    for (id = 1; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        if (!ucp_failover_seq_orphan(seq->streams[id])) {
            continue;
        }

        status = ucp_failover_seq_send_stream_backlog(seq_ep,
                                                      seq->streams[id]);
        if (status != UCS_OK) {
            return status;
        }
    }

    return UCS_OK;
}

/*
 * Move things along: send the backlog, then run the requests that wait in
 * the sequencing endpoint's queue, while the transport takes them and the
 * window has room. What is left waits for the transport (the resume request
 * on its pending queue) or for acknowledgements (the window). Requests never
 * wait on the transport's own queue: a transport may require that a request
 * it dispatches either sends or completes (UCT/TCP asserts it), and one that
 * finds the window full does neither.
 *
 * @a queued_on is the transport endpoint whose pending queue is running the
 * resume request now (NULL when not called from there). Then the resume
 * request must not be added to that queue again from inside its own
 * callback: transports that keep pending requests in an arbiter (RC, DC, UD)
 * would dispatch it again in the same pass while no send completion can be
 * reaped, a livelock. It stays queued instead: UCS_ERR_NO_RESOURCE is
 * returned for the callback to return.
 */
static ucs_status_t ucp_failover_seq_kick_from(ucp_failover_seq_ep_t *seq_ep,
                                               uct_ep_h queued_on)
{
    ucs_status_t ret = UCS_OK;
    uct_pending_req_priv_queue_t *priv;
    ucs_status_t status;
    uct_ep_h tl_ep;
    int retries, dispatching;

    ++seq_ep->busy;
    for (retries = 0; (retries < 16) && !seq_ep->dead; ++retries) {
        seq_ep->mem_wait = 0;
        status           = ucp_failover_seq_send_backlog(seq_ep);
        if (seq_ep->dead ||
            (UCS_STATUS_IS_ERR(status) && (status != UCS_ERR_NO_RESOURCE))) {
            goto out;
        }

        if (status == UCS_OK) {
            /* a request that fails the lane may move the wrapper or fail
             * the endpoint under this loop: it stops then */
            dispatching         = seq_ep->dispatching;
            seq_ep->dispatching = 1;
            uct_pending_queue_dispatch(priv, &seq_ep->pending,
                                       !seq_ep->window_full && !seq_ep->dead);
            seq_ep->dispatching = dispatching;
            if (seq_ep->dead) {
                goto out;
            }
        }

        if ((!ucp_failover_seq_has_backlog(seq_ep) &&
             (ucs_queue_is_empty(&seq_ep->pending) || seq_ep->window_full)) ||
            seq_ep->resume_queued) {
            goto out;
        }

        /* the current transport endpoint: a failover may have changed it */
        tl_ep = ucp_failover_seq_tl_ep(seq_ep);
        if ((tl_ep == queued_on) && seq_ep->mem_wait) {
            /* Memory for a copy stopped it, not the transport, which may
             * have room: a transport's pending callback must not decline
             * then (RC asserts that the endpoint has no resources). The
             * resume request leaves the queue; progress tries again. */
            break;
        } else if (tl_ep == queued_on) {
            seq_ep->resume_queued = 1;
            seq_ep->resume_ep     = tl_ep;
            ret                   = UCS_ERR_NO_RESOURCE;
            goto out;
        }

        status = uct_ep_pending_add(tl_ep, &seq_ep->resume, 0);
        if (status == UCS_OK) {
            seq_ep->resume_queued = 1;
            seq_ep->resume_ep     = tl_ep;
            goto out;
        } else if (status != UCS_ERR_BUSY) {
            goto out; /* the lane is failing */
        }
        /* the transport has resources again: go on */
    }

    if (!seq_ep->dead) {
        ucp_failover_seq_dispatch_schedule(seq_ep);
    }

out:
    if (ucp_failover_seq_ep_waiting(seq_ep)) {
        /* what the transport holds up: the probe rounds move it along too */
        ucp_failover_round_want(ucp_failover_ep(seq_ep->seq->ep));
    }

    --seq_ep->busy;
    return ret;
}

void ucp_failover_seq_kick(ucp_failover_seq_ep_t *seq_ep)
{
    (void)ucp_failover_seq_kick_from(seq_ep, NULL);
}

static unsigned ucp_failover_seq_ep_release(void *arg)
{
    uct_ep_destroy(arg);
    return 1;
}

/* Free a dead wrapper, from progress if it is in one of its own calls */
void ucp_failover_seq_ep_free_dead(ucp_failover_seq_ep_t *seq_ep)
{
    uct_worker_cb_id_t cb_id = UCS_CALLBACKQ_ID_NULL;

    if (seq_ep->busy == 0) {
        uct_ep_destroy(&seq_ep->super.super);
        return;
    }

    uct_worker_progress_register_safe(seq_ep->worker->uct,
                                      ucp_failover_seq_ep_release,
                                      &seq_ep->super.super,
                                      UCS_CALLBACKQ_FLAG_ONESHOT, &cb_id);
}

static ucs_status_t ucp_failover_seq_resume_progress(uct_pending_req_t *self)
{
    ucp_failover_seq_ep_t *seq_ep = ucs_container_of(self,
                                                     ucp_failover_seq_ep_t,
                                                     resume);

    uct_ep_h queued_on            = seq_ep->resume_ep;

    seq_ep->resume_queued = 0;
    seq_ep->resume_ep     = NULL;
    if (seq_ep->dead) {
        /* a wrapper taken off a live transport endpoint while this request
         * waited there (ucp_failover_seq_dissolve): its last reference */
        ucp_failover_seq_ep_free_dead(seq_ep);
        return UCS_OK;
    }

    return ucp_failover_seq_kick_from(seq_ep, queued_on);
}

/*
 * A message is declined (requests wait, or the window is full). The caller
 * may be a request that the transport dispatched from its own pending queue
 * (one queued on the lane before it became the am lane), ahead of the resume
 * request: make sure the wrapper moves along from progress even if the
 * transport retries that request first.
 */
static ucs_status_t ucp_failover_seq_decline(ucp_failover_seq_ep_t *seq_ep)
{
    if (!seq_ep->window_full) {
        ucp_failover_seq_dispatch_schedule(seq_ep);
    }

    return UCS_ERR_NO_RESOURCE;
}

/* The worker's buffers are at their bound: a release wakes the wrapper */
static void ucp_failover_seq_pool_wake(ucp_failover_pool_waiter_t *waiter)
{
    ucp_failover_seq_ep_t *seq_ep = ucs_container_of(waiter,
                                                     ucp_failover_seq_ep_t,
                                                     pool_waiter);

    seq_ep->window_full = 0;
    ucp_failover_seq_dispatch_schedule(seq_ep);
}

static UCS_F_NOINLINE ucs_status_t
ucp_failover_seq_worker_full(ucp_failover_seq_ep_t *seq_ep)
{
    if (!seq_ep->window_full) {
        ++seq_ep->stream->window_stalls;
        seq_ep->window_full = 1;
    }

    ucp_failover_pool_wait(seq_ep->seq->pool, &seq_ep->pool_waiter);
    return UCS_ERR_NO_RESOURCE;
}

/*
 * Whether the wrapper takes a new message now (UCS_OK), or
 * UCS_ERR_NO_RESOURCE while requests wait or the retention is full. A
 * message not sent yet (the transport had no room) does not decline the next
 * one: it is numbered after it and goes after it, so the order holds, and a
 * request the transport dispatches finds room.
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
ucp_failover_seq_admit(ucp_failover_seq_ep_t *seq_ep)
{
    ucp_failover_seq_stream_t *st = seq_ep->stream;

    if (ucs_unlikely(st == NULL)) {
        /* a detached wrapper a caller still holds: the request goes to the
         * lane's current endpoint's queue */
        return UCS_ERR_NO_RESOURCE;
    }

    /* behind requests waiting: keep the order */
    if (ucs_unlikely(!ucs_queue_is_empty(&seq_ep->pending) &&
                     !seq_ep->dispatching)) {
        return ucp_failover_seq_decline(seq_ep);
    }

    /* the bounds: the endpoint's, all its streams together, and the
     * worker's, all its endpoints together */
    if (ucs_unlikely(seq_ep->seq->retained_bytes >= seq_ep->retain)) {
        if (!seq_ep->window_full) {
            ++st->window_stalls;
            seq_ep->window_full      = 1;
            seq_ep->seq->window_full = 1;
        }
        return UCS_ERR_NO_RESOURCE;
    } else if (ucs_unlikely(ucp_failover_pool_full(seq_ep->seq->pool))) {
        return ucp_failover_seq_worker_full(seq_ep);
    }

    return UCS_OK;
}

/* No memory for a retained copy: the message waits, as one that finds the
 * window full, and is tried again from progress (nothing is dropped) */
static UCS_F_NOINLINE ucs_status_t
ucp_failover_seq_no_memory(ucp_failover_seq_ep_t *seq_ep, size_t length)
{
    ucs_diag("ep %p: no memory to retain a message of %zu bytes, it waits",
             seq_ep->super.ucp_ep, length);
    seq_ep->mem_wait = 1;
    return ucp_failover_seq_decline(seq_ep);
}

/* ucp_failover_seq_reserve() of a message that needs a new chunk or a
 * buffer of its own, or waits */
static UCS_F_NOINLINE ucs_status_t
ucp_failover_seq_reserve_slow(ucp_failover_seq_ep_t *seq_ep, size_t length,
                              ucp_failover_seq_entry_t **entry_p)
{
    ucs_status_t status;

    status = ucp_failover_seq_admit(seq_ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    *entry_p = ucp_failover_seq_entry_alloc(seq_ep->seq, seq_ep->stream,
                                            length);
    if (ucs_unlikely(*entry_p == NULL)) {
        return ucp_failover_seq_no_memory(seq_ep, length);
    }

    return UCS_OK;
}

/* The stream's current chunk if a new message may take a place of @a size
 * bytes in it (no requests wait for the wrapper), else NULL */
static UCS_F_ALWAYS_INLINE ucp_failover_seq_chunk_t *
ucp_failover_seq_chunk_room(ucp_failover_seq_ep_t *seq_ep, size_t size)
{
    ucp_failover_seq_stream_t *st = seq_ep->stream;
    ucp_failover_seq_chunk_t *chunk;

    if ((st != NULL) && ((chunk = st->chunk) != NULL) &&
        ucs_queue_is_empty(&seq_ep->pending) &&
        ((chunk->used + size) <= chunk->size)) {
        return chunk;
    }

    return NULL;
}

/*
 * Take a message for sending: a retained entry of @a length bytes (the
 * trailer comes on top). The usual small message takes a place in its
 * stream's current chunk: the chunk's bytes were checked against the bounds
 * (ucp_failover_seq_admit()) and counted when the stream took it, so
 * nothing more is checked; a message that needs a new chunk or a buffer of
 * its own, or that finds requests waiting, takes the slow path.
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
ucp_failover_seq_reserve(ucp_failover_seq_ep_t *seq_ep, size_t length,
                         ucp_failover_seq_entry_t **entry_p)
{
    size_t size = ucs_align_up_pow2(ucp_failover_seq_entry_size(length), 8);
    ucp_failover_seq_chunk_t *chunk;

    if (ucs_likely((size <= UCP_FAILOVER_SEQ_CHUNK_ENTRY_MAX) &&
                   ((chunk = ucp_failover_seq_chunk_room(seq_ep, size)) !=
                    NULL))) {
        *entry_p = ucp_failover_seq_chunk_entry(seq_ep->seq, chunk, size);
        return UCS_OK;
    }

    return ucp_failover_seq_reserve_slow(seq_ep, length, entry_p);
}

/* The transport did not take a new message: it goes after the backlog, when
 * the transport has room; or the lane is failing */
static void ucp_failover_seq_submit_unsent(ucp_failover_seq_ep_t *seq_ep,
                                           ucp_failover_seq_entry_t *entry,
                                           ucs_status_t status)
{
    if (status == UCS_ERR_NO_RESOURCE) {
        if (seq_ep->stream->unsent == NULL) {
            ucp_failover_seq_unsent_set(seq_ep->stream, entry);
        }
        ucp_failover_round_want(ucp_failover_ep(seq_ep->seq->ep));
        if (!seq_ep->dispatching) {
            ucp_failover_seq_kick(seq_ep);
        }
    } else {
        ucs_debug("ep %p: sequenced message %u:%u not sent: %s",
                  seq_ep->seq->ep, seq_ep->stream->id, entry->sn,
                  ucs_status_string(status));
    }
}

/* Number a new message of @a length bytes of @a st and queue it in the
 * retention (an entry in a chunk: the chunk's bytes are counted already) */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_number(ucp_failover_seq_stream_t *st,
                        ucp_failover_seq_entry_t *entry, size_t length)
{
    entry->sn     = st->tx_next++;
    entry->length = length + UCP_FAILOVER_SEQ_HDR_LEN;
    ucs_queue_push(&st->retained, &entry->queue);
}

/* Number a new message of @a length bytes (its entry filled, or about to
 * be) and retain it */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_retain(ucp_failover_seq_ep_t *seq_ep,
                        ucp_failover_seq_entry_t *entry, size_t length)
{
    ucp_failover_seq_t *seq       = seq_ep->seq;
    ucp_failover_seq_stream_t *st = seq_ep->stream;

    ucp_failover_seq_number(st, entry, length);
    if (ucs_unlikely(entry->held != 0)) {
        /* a buffer of its own (a chunk's bytes count from when the stream
         * takes it) */
        ucp_failover_seq_held_add(seq, st, entry->held);
    }
}

/* Write the trailer of a new message, numbered @a sn, at @a dest; with the
 * current acknowledgement if @a ack_now, else with none (it is filled when
 * the message is sent, after the backlog) */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_trailer_write(ucp_failover_seq_ep_t *seq_ep, uint32_t sn,
                               uint8_t am_id, uint32_t ack, uint8_t flags,
                               void *dest)
{
    ucp_failover_seq_hdr_t hdr;

    hdr.ep_id  = seq_ep->seq->remote_id;
    hdr.sn     = sn;
    hdr.ack    = ack;
    hdr.am_id  = am_id;
    hdr.flags  = flags;
    hdr.stream = seq_ep->stream->id;
    memcpy(dest, &hdr, sizeof(hdr));
}

static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_trailer(ucp_failover_seq_ep_t *seq_ep, uint32_t sn,
                         uint8_t am_id, void *dest, int ack_now,
                         uint8_t flags)
{
    uint32_t ack;

    if (ucs_likely(ack_now)) {
        flags |= ucp_failover_seq_ack_take(seq_ep, seq_ep->stream, sn, &ack);
    } else {
        /* an acknowledgement that may be old when it goes (cumulative: it
         * is still true), not counted as sent */
        ack = ucp_failover_seq_rx_delivered(&seq_ep->seq->main);
    }

    ucp_failover_seq_trailer_write(seq_ep, sn, am_id, ack, flags, dest);
}

/* A new message, numbered and retained, goes after the messages not sent
 * yet, which the queued resume request sends when the transport has room
 * (and fills the rest of its trailer then) */
static UCS_F_NOINLINE ucs_status_t
ucp_failover_seq_submit_behind(ucp_failover_seq_ep_t *seq_ep,
                               ucp_failover_seq_entry_t *entry, uint8_t am_id,
                               size_t length)
{
    ucp_failover_seq_trailer(seq_ep, entry->sn, am_id, entry->data + length,
                             0, 0);
    if (!seq_ep->dispatching && !seq_ep->resume_queued) {
        ucp_failover_seq_kick(seq_ep);
    }

    return UCS_OK;
}

/* Write the trailer of a new message, numbered and retained, with the
 * current acknowledgement and hand it to the transport; if the transport
 * does not take it, it stays retained and goes later (out of line, so that
 * the short message's path that ends here keeps a small frame) */
static UCS_F_NOINLINE ucs_status_t
ucp_failover_seq_post_new(ucp_failover_seq_ep_t *seq_ep,
                          ucp_failover_seq_entry_t *entry, uint8_t am_id)
{
    ucs_status_t status;

    ucp_failover_seq_trailer(seq_ep, entry->sn, am_id,
                             entry->data + entry->length -
                             UCP_FAILOVER_SEQ_HDR_LEN, 1, 0);
    ++seq_ep->busy;
    status = ucp_failover_seq_tl_post(seq_ep, entry);
    --seq_ep->busy;
    if (ucs_unlikely(UCS_STATUS_IS_ERR(status)) && !seq_ep->dead) {
        /* (dead: the endpoint failed in the send) */
        ucp_failover_seq_submit_unsent(seq_ep, entry, status);
    }

    return UCS_OK;
}

/* Number a filled entry, retain it and send it (or leave it to the backlog);
 * its trailer is written once, here. Returns UCS_OK: the message is the
 * wrapper's now. */
static UCS_F_ALWAYS_INLINE ucs_status_t
ucp_failover_seq_submit(ucp_failover_seq_ep_t *seq_ep,
                        ucp_failover_seq_entry_t *entry, uint8_t am_id,
                        size_t length)
{
    ucp_failover_seq_retain(seq_ep, entry, length);
    if (ucs_unlikely(seq_ep->stream->unsent != NULL)) {
        return ucp_failover_seq_submit_behind(seq_ep, entry, am_id, length);
    }

    return ucp_failover_seq_post_new(seq_ep, entry, am_id);
}

/* ---------------------------------------------------------------------------
 * The sequencing endpoint
 */

static UCS_F_ALWAYS_INLINE int ucp_failover_seq_passthrough(uint8_t id)
{
    /* failover's own control messages are not sequenced: they are about
     * lanes, and must pass while the sequence is held up. Neither are
     * wireup's: they connect the lanes, and the peer may need one (the
     * wireup ACK, which makes its RC lanes ready) before it can acknowledge
     * anything, so one held up behind a full window is a deadlock; a lost
     * one is handled by wireup, as without failover */
    /* (UCT's active message ids are below 32) */
    return !!(UCS_BIT(id) & (UCS_BIT(UCP_AM_ID_FAILOVER) |
                             UCS_BIT(UCP_AM_ID_FAILOVER_SEQ) |
                             UCS_BIT(UCP_AM_ID_WIREUP)));
}

/* Copy 8 to 16 bytes (a tag's eager message of a word or two) inline, as
 * two words that may overlap, instead of a call */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_copy_words(void *dest, const void *src, size_t length)
{
    uint64_t head, tail;

    memcpy(&head, src, sizeof(head));
    memcpy(&tail, UCS_PTR_BYTE_OFFSET(src, length - sizeof(tail)),
           sizeof(tail));
    memcpy(dest, &head, sizeof(head));
    memcpy(UCS_PTR_BYTE_OFFSET(dest, length - sizeof(tail)), &tail,
           sizeof(tail));
}

/* Copy a short message's payload: one or two words inline */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_copy_short(void *dest, const void *src, size_t length)
{
    if ((length >= sizeof(uint64_t)) && (length <= (2 * sizeof(uint64_t)))) {
        ucp_failover_seq_copy_words(dest, src, length);
    } else {
        memcpy(dest, src, length);
    }
}

/* The payload lengths the fast short send takes: a header and one or two
 * words, with the trailer within the transport's short message */
void ucp_failover_seq_ep_short_span(ucp_failover_seq_ep_t *seq_ep)
{
    size_t fixed = sizeof(uint64_t) + UCP_FAILOVER_SEQ_HDR_LEN;
    size_t max;

    max                    = (seq_ep->max_short > fixed) ?
                             ucs_min(seq_ep->max_short - fixed,
                                     2 * sizeof(uint64_t)) : 0;
    seq_ep->short_span_max = (max >= sizeof(uint64_t)) ?
                             (max - sizeof(uint64_t) + 1) : 0;
    ucp_failover_seq_ep_gate_close(seq_ep);
}

void ucp_failover_seq_gates_close(ucp_failover_seq_t *seq)
{
    uint8_t id;

    if (seq->seq_ep != NULL) {
        ucp_failover_seq_ep_gate_close(seq->seq_ep);
    }

    for (id = 0; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        if ((seq->streams[id] != NULL) &&
            (seq->streams[id]->seq_ep != NULL)) {
            ucp_failover_seq_ep_gate_close(seq->streams[id]->seq_ep);
        }
    }
}

/* Open the gate of the fast short send if nothing it does not check holds
 * (ucp_failover_seq_ep_gate_close). Not while the wrapper dispatches its
 * waiting requests: uct_pending_queue_dispatch() takes the request it runs
 * out of the queue, and puts it back at its head if it is not sent, past
 * the gate's closing. */
static void ucp_failover_seq_ep_gate_open(ucp_failover_seq_ep_t *seq_ep)
{
    ucp_failover_seq_stream_t *st = seq_ep->stream;

    if ((st != NULL) && !seq_ep->dispatching &&
        ucs_queue_is_empty(&seq_ep->pending) && (st->unsent == NULL) &&
        !seq_ep->seq->ack_req_due) {
        seq_ep->short_span = seq_ep->short_span_max;
    }
}

/* ucp_failover_seq_ep_am_short() of any message */
static UCS_F_NOINLINE ucs_status_t
ucp_failover_seq_ep_am_short_any(ucp_failover_seq_ep_t *seq_ep, uint8_t id,
                                 uint64_t header, const void *payload,
                                 unsigned length)
{
    ucp_failover_seq_entry_t *entry;
    ucs_status_t status;

    ucp_failover_seq_ep_gate_open(seq_ep);
    status = ucp_failover_seq_reserve(seq_ep, sizeof(header) + length, &entry);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    memcpy(entry->data, &header, sizeof(header));
    ucp_failover_seq_copy_short(entry->data + sizeof(header), payload,
                                length);
    return ucp_failover_seq_submit(seq_ep, entry, id, sizeof(header) + length);
}

/* The transport did not take a new short message that the fast path
 * retained: it goes later, or with the failing lane's failover */
static UCS_F_NOINLINE ucs_status_t
ucp_failover_seq_post_failed(ucp_failover_seq_ep_t *seq_ep,
                             ucp_failover_seq_entry_t *entry,
                             ucs_status_t status)
{
    if (!seq_ep->dead) {
        /* (dead: the endpoint failed in the send) */
        ucp_failover_seq_submit_unsent(seq_ep, entry, status);
    }

    return UCS_OK;
}

/*
 * A short message. The usual one, a header and a payload of one or two
 * words (ucp_failover_seq_ep_short_span) that takes a place in the stream's
 * current chunk, is copied, numbered, retained and handed to the transport
 * here, in one frame, with the helpers of the general path but the request
 * for an acknowledgement (ucp_failover_seq_ack_give()). The gate
 * (short_span, ucp_failover_seq_ep_gate_close) stands for everything else
 * the general path checks: waiting requests, a backlog, a request for an
 * acknowledgement, a wrapper with no stream. Anything else goes to
 * ucp_failover_seq_ep_am_short_any(). (Built without SLP vectorisation,
 * UCP_FAILOVER_SEQ_NO_SLP.)
 */
static UCP_FAILOVER_SEQ_NO_SLP ucs_status_t
ucp_failover_seq_ep_am_short(uct_ep_h uct_ep, uint8_t id, uint64_t header,
                             const void *payload, unsigned length)
{
    ucp_failover_seq_ep_t *seq_ep = ucs_derived_of(uct_ep,
                                                   ucp_failover_seq_ep_t);
    ucp_failover_seq_stream_t *st = seq_ep->stream;
    size_t size = ucs_align_up_pow2(
            ucp_failover_seq_entry_size(sizeof(header) + length), 8);
    ucp_failover_seq_entry_t *entry;
    ucp_failover_seq_chunk_t *chunk;
    ucs_status_t status;

    UCS_STATIC_ASSERT(ucs_align_up_pow2(ucs_offsetof(ucp_failover_seq_entry_t,
                                                     data) +
                                        (3 * sizeof(uint64_t)) +
                                        UCP_FAILOVER_SEQ_HDR_LEN, 8) <=
                      UCP_FAILOVER_SEQ_FAST_ENTRY_MAX);

    if (ucs_unlikely(ucp_failover_seq_passthrough(id))) {
        return uct_ep_am_short(ucp_failover_seq_tl_ep(seq_ep), id, header,
                               payload, length);
    }

    if (ucs_unlikely(((length - sizeof(uint64_t)) >= seq_ep->short_span) ||
                     ((chunk = st->chunk) == NULL) ||
                     (chunk->used > chunk->fast_end))) {
        return ucp_failover_seq_ep_am_short_any(seq_ep, id, header, payload,
                                                length);
    }

    entry = ucp_failover_seq_chunk_entry(seq_ep->seq, chunk, size);
    memcpy(entry->data, &header, sizeof(header));
    ucp_failover_seq_copy_words(entry->data + sizeof(header), payload,
                                length);
    ucp_failover_seq_number(st, entry, sizeof(header) + length);
    /* (no request for an acknowledgement: ack_req_due is not set) */
    ucp_failover_seq_trailer_write(seq_ep, entry->sn, id,
                                   ucp_failover_seq_ack_give(seq_ep), 0,
                                   entry->data + sizeof(header) + length);

    ++seq_ep->busy;
    status = uct_ep_am_short(ucp_failover_seq_tl_ep(seq_ep),
                             UCP_AM_ID_FAILOVER_SEQ, header,
                             entry->data + sizeof(header),
                             length + UCP_FAILOVER_SEQ_HDR_LEN);
    --seq_ep->busy;
    if (ucs_unlikely(UCS_STATUS_IS_ERR(status))) {
        return ucp_failover_seq_post_failed(seq_ep, entry, status);
    }

    return status;
}

static ucs_status_t
ucp_failover_seq_ep_am_short_iov(uct_ep_h uct_ep, uint8_t id,
                                 const uct_iov_t *iov, size_t iovcnt)
{
    ucp_failover_seq_ep_t *seq_ep = ucs_derived_of(uct_ep,
                                                   ucp_failover_seq_ep_t);
    size_t length                 = uct_iov_total_length(iov, iovcnt);
    ucp_failover_seq_entry_t *entry;
    ucs_status_t status;

    if (ucs_unlikely(ucp_failover_seq_passthrough(id))) {
        return uct_ep_am_short_iov(ucp_failover_seq_tl_ep(seq_ep), id, iov,
                                   iovcnt);
    }

    status = ucp_failover_seq_reserve(seq_ep, length, &entry);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    ucp_failover_seq_iov_copy(entry->data, iov, iovcnt, length);
    ucp_failover_seq_submit(seq_ep, entry, id, length);
    return UCS_OK;
}

/* An entry of max_bcopy that holds @a length bytes: one of the size they
 * need instead (a place in the stream's chunk for a small message), if there
 * is memory (a small message that waited for the transport counts as
 * small) */
static ucp_failover_seq_entry_t *
ucp_failover_seq_entry_shrink(ucp_failover_seq_ep_t *seq_ep,
                              ucp_failover_seq_entry_t *entry, size_t length)
{
    size_t size = ucs_offsetof(ucp_failover_seq_entry_t, data) + length +
                  UCP_FAILOVER_SEQ_HDR_LEN;
    ucp_failover_seq_entry_t *small;

    if ((entry->chunk != NULL) ||
        ((size > UCP_FAILOVER_SEQ_CHUNK_ENTRY_MAX) &&
         (ucp_failover_pool_bucket_size(size) >= entry->held))) {
        return entry;
    }

    small = ucp_failover_seq_entry_alloc(seq_ep->seq, seq_ep->stream, length);
    if (small == NULL) {
        return entry;
    }

    memcpy(small->data, entry->data, length);
    ucp_failover_seq_entry_free(entry);
    return small;
}

/* A new bcopy message packed by the transport (ucp_failover_seq_pack) */
typedef struct {
    ucp_failover_seq_ep_t    *seq_ep;
    uct_pack_callback_t      pack_cb;
    void                     *arg;
    uint8_t                  am_id;
    int                      packed;  /* pack_cb ran */
    size_t                   length;  /* what it packed */
    ucp_failover_seq_entry_t *entry;  /* the retained copy, or NULL */
} ucp_failover_seq_pack_ctx_t;

/*
 * Pack a new message straight into the transport's buffer, add its trailer,
 * and retain a copy of what it holds: the message is packed once, and its
 * copy holds what its length needs. Without memory for the copy, the
 * transport's buffer becomes an acknowledgement of stream 0 (ACK_ONLY: the
 * receiver takes the ack and ignores the rest) and the message waits.
 */
static size_t ucp_failover_seq_pack(void *dest, void *arg)
{
    ucp_failover_seq_pack_ctx_t *ctx = arg;
    ucp_failover_seq_ep_t *seq_ep    = ctx->seq_ep;
    ucp_failover_seq_t *seq          = seq_ep->seq;
    ucp_failover_seq_entry_t *entry;
    ucp_failover_seq_hdr_t hdr;
    size_t length;

    length      = ctx->pack_cb(dest, ctx->arg);
    ctx->packed = 1;
    ctx->length = length;
    ucs_assertv(length <= (seq_ep->max_bcopy - UCP_FAILOVER_SEQ_HDR_LEN),
                "packed %zu max_bcopy %zu", length, seq_ep->max_bcopy);

    entry = ucp_failover_seq_entry_alloc(seq, seq_ep->stream, length);
    if (ucs_unlikely(entry == NULL)) {
        hdr.ep_id  = seq->remote_id;
        hdr.sn     = 0;
        hdr.ack    = ucp_failover_seq_rx_delivered(&seq->main);
        hdr.am_id  = 0;
        hdr.flags  = UCP_FAILOVER_SEQ_FLAG_ACK_ONLY;
        hdr.stream = 0;
        memcpy(UCS_PTR_BYTE_OFFSET(dest, length), &hdr, sizeof(hdr));
        return length + UCP_FAILOVER_SEQ_HDR_LEN;
    }

    ucp_failover_seq_retain(seq_ep, entry, length);
    ucp_failover_seq_trailer(seq_ep, entry->sn, ctx->am_id,
                             UCS_PTR_BYTE_OFFSET(dest, length), 1, 0);
    memcpy(entry->data, dest, entry->length);
    ctx->entry = entry;
    return entry->length;
}

static ssize_t ucp_failover_seq_ep_am_bcopy(uct_ep_h uct_ep, uint8_t id,
                                            uct_pack_callback_t pack_cb,
                                            void *arg, unsigned flags)
{
    ucp_failover_seq_ep_t *seq_ep = ucs_derived_of(uct_ep,
                                                   ucp_failover_seq_ep_t);
    ucp_failover_seq_pack_ctx_t ctx;
    ucp_failover_seq_entry_t *entry;
    ucs_status_t status;
    size_t max_bcopy;
    ssize_t packed;
    size_t length;

    if (ucs_unlikely(ucp_failover_seq_passthrough(id))) {
        return uct_ep_am_bcopy(ucp_failover_seq_tl_ep(seq_ep), id, pack_cb,
                               arg, flags);
    }

    status = ucp_failover_seq_admit(seq_ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    if (ucs_likely(seq_ep->stream->unsent == NULL)) {
        ctx.seq_ep  = seq_ep;
        ctx.pack_cb = pack_cb;
        ctx.arg     = arg;
        ctx.am_id   = id;
        ctx.packed  = 0;
        ctx.entry   = NULL;
        ++seq_ep->busy;
        packed = uct_ep_am_bcopy(ucp_failover_seq_tl_ep(seq_ep),
                                 UCP_AM_ID_FAILOVER_SEQ, ucp_failover_seq_pack,
                                 &ctx, flags);
        --seq_ep->busy;
        if (ucs_likely(ctx.entry != NULL)) {
            if (ucs_unlikely(packed < 0) && !seq_ep->dead) {
                /* the lane is failing (its failover sends it again), or the
                 * transport had no room after all (it goes after) */
                ucp_failover_seq_submit_unsent(seq_ep, ctx.entry,
                                               (ucs_status_t)packed);
            }
            return ctx.length;
        } else if (ucs_unlikely(seq_ep->stream == NULL)) {
            /* detached in the call (the endpoint failed): the request goes
             * to the lane's current endpoint */
            return UCS_ERR_NO_RESOURCE;
        } else if (ucs_unlikely(ctx.packed)) {
            return ucp_failover_seq_no_memory(seq_ep, ctx.length);
        }
        /* the transport had no room, or failed: the message is taken
         * anyway, into an entry of its own, and goes after */
    }

    max_bcopy = seq_ep->max_bcopy - UCP_FAILOVER_SEQ_HDR_LEN;
    entry     = ucp_failover_seq_entry_alloc(seq_ep->seq, seq_ep->stream,
                                             max_bcopy);
    if (ucs_unlikely(entry == NULL)) {
        return ucp_failover_seq_no_memory(seq_ep, max_bcopy);
    }

    length = pack_cb(entry->data, arg);
    ucs_assertv(length <= max_bcopy, "packed %zu max_bcopy %zu", length,
                max_bcopy);
    ucp_failover_seq_submit(seq_ep, ucp_failover_seq_entry_shrink(seq_ep, entry,
                                                                  length),
                            id, length);
    return length;
}

/*
 * A zero-copy message sent by reference (ucp_failover_seq_ref_t): an entry
 * holds its header, its trailer and the user's iov, and the transport sends
 * the user's data from where it is. The user's request (@a comp) completes
 * when the peer has acknowledged the message, which it is asked to do at
 * once, and no transport reads the data any more; meanwhile the message can
 * be sent again from the user's buffer. Returns UCS_INPROGRESS: UCP counts
 * the completion, as it does for a transport; UCS_ERR_UNSUPPORTED if the
 * transport needs memory handles and there is no registered buffer for the
 * trailer (the caller copies the message).
 */
static UCS_F_NOINLINE ucs_status_t
ucp_failover_seq_send_ref(ucp_failover_seq_ep_t *seq_ep, uint8_t id,
                          const void *header, unsigned header_length,
                          const uct_iov_t *iov, size_t iovcnt, unsigned flags,
                          uct_completion_t *comp)
{
    ucp_failover_seq_t *seq       = seq_ep->seq;
    ucp_failover_seq_stream_t *st = seq_ep->stream;
    size_t hdr_space              = ucs_align_up_pow2(header_length +
                                                      UCP_FAILOVER_SEQ_HDR_LEN,
                                                      8);
    uct_mem_h trailer_memh        = UCT_MEM_HANDLE_NULL;
    ucp_failover_seq_entry_t *entry;
    ucp_failover_seq_ref_t *ref;
    ucs_status_t status;
    uint8_t ask;
    size_t held, size;

    /* the largest entry, with a header of 64 bytes, fits a registered
     * buffer (a larger one is copied) */
    UCS_STATIC_ASSERT(ucs_offsetof(ucp_failover_seq_entry_t, data) + 64 +
                      UCP_FAILOVER_SEQ_HDR_LEN + 8 +
                      sizeof(ucp_failover_seq_ref_t) +
                      (UCP_FAILOVER_SEQ_REF_IOV * sizeof(uct_iov_t)) <=
                      UCP_FAILOVER_POOL_REG_SIZE);

    status = ucp_failover_seq_admit(seq_ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    size = ucs_offsetof(ucp_failover_seq_entry_t, data) + hdr_space +
           sizeof(*ref) + ((iovcnt + 1) * sizeof(*iov));
    if (seq_ep->ref_md == UCP_NULL_RESOURCE) {
        entry = ucp_failover_pool_get(seq->pool, size, &held);
        if (ucs_unlikely(entry == NULL)) {
            return ucp_failover_seq_no_memory(seq_ep, header_length);
        }
    } else {
        /* the trailer goes from registered memory; without it, copied */
        entry = ucp_failover_pool_get_reg(seq->pool, size, &held);
        if (ucs_unlikely(entry == NULL)) {
            return UCS_ERR_UNSUPPORTED;
        }

        trailer_memh = ucp_failover_pool_memh(entry, seq_ep->ref_md);
        if (ucs_unlikely(trailer_memh == UCT_MEM_HANDLE_NULL)) {
            ucp_failover_pool_put(entry, held);
            return UCS_ERR_UNSUPPORTED;
        }
    }

    /* the count holds one for this call: the user's completion never comes
     * from inside it (UCP counts it when this returns) */
    entry->chunk       = NULL;
    entry->held        = held;
    entry->flags       = UCP_FAILOVER_SEQ_ENTRY_REF;
    entry->comp.func   = ucp_failover_seq_comp_cb;
    entry->comp.status = UCS_OK;
    entry->comp.count  = 1;
    entry->seq         = seq;
    memcpy(entry->data, header, header_length);
    ucp_failover_seq_retain(seq_ep, entry, header_length);
    ++st->refs;
    ++st->tx_refs;

    ref             = ucp_failover_seq_entry_ref(entry);
    ref->user_comp  = comp;
    ref->status     = UCS_OK;
    ref->iovcnt     = iovcnt;
    ref->send_flags = flags;
    ref->md         = seq_ep->ref_md;
    memcpy(ref->iov, iov, iovcnt * sizeof(*iov));
    ref->iov[iovcnt].buffer = entry->data + header_length;
    ref->iov[iovcnt].length = UCP_FAILOVER_SEQ_HDR_LEN;
    ref->iov[iovcnt].memh   = trailer_memh;
    ref->iov[iovcnt].stride = 0;
    ref->iov[iovcnt].count  = 1;

    /* the user's request waits for the acknowledgement: ask for it, unless
     * a message on its way asks already (the acknowledgement it brings asks
     * again for the rest, ucp_failover_seq_release_upto()) */
    if (!st->ack_asked) {
        ask              = UCP_FAILOVER_SEQ_FLAG_ACK_REQ;
        st->ack_asked    = 1;
        st->ack_asked_sn = entry->sn;
    } else {
        ask = 0;
    }

    ++seq_ep->busy;
    if (ucs_likely(st->unsent == NULL)) {
        ucp_failover_seq_trailer(seq_ep, entry->sn, id,
                                 entry->data + header_length, 1, ask);
        status        = ucp_failover_seq_tl_post_ref(seq_ep, entry);
        if (ucs_unlikely(UCS_STATUS_IS_ERR(status)) && !seq_ep->dead) {
            /* sent from the backlog: again by reference, or copied */
            ucp_failover_seq_submit_unsent(seq_ep, entry, status);
        }
    } else {
        /* after the backlog (the trailer's acknowledgement is filled then) */
        ucp_failover_seq_trailer(seq_ep, entry->sn, id,
                                 entry->data + header_length, 0, ask);
        if (!seq_ep->dispatching && !seq_ep->resume_queued) {
            ucp_failover_seq_kick(seq_ep);
        }
    }
    --seq_ep->busy;

    if ((--entry->comp.count == 0) && ucs_unlikely(entry->seq == NULL)) {
        /* it left the retention in this call (copied, or dropped: the
         * endpoint failed), and no transport reads the user's data: UCP is
         * told the outcome now */
        status         = ref->status;
        ref->user_comp = NULL;
        ucp_failover_seq_ref_free(entry);
        return status;
    }

    return UCS_INPROGRESS;
}

static ucs_status_t
ucp_failover_seq_ep_am_zcopy(uct_ep_h uct_ep, uint8_t id, const void *header,
                             unsigned header_length, const uct_iov_t *iov,
                             size_t iovcnt, unsigned flags,
                             uct_completion_t *comp)
{
    ucp_failover_seq_ep_t *seq_ep = ucs_derived_of(uct_ep,
                                                   ucp_failover_seq_ep_t);
    size_t length;
    ucp_failover_seq_entry_t *entry;
    ucs_status_t status;

    if (ucs_unlikely(ucp_failover_seq_passthrough(id))) {
        return uct_ep_am_zcopy(ucp_failover_seq_tl_ep(seq_ep), id, header,
                               header_length, iov, iovcnt, flags, comp);
    }

    length = header_length + uct_iov_total_length(iov, iovcnt);
    if (ucs_likely((length >= seq_ep->ref_thresh) &&
                   (iovcnt < seq_ep->ref_iov) && (comp != NULL) &&
                   (seq_ep->stream != NULL))) {
        status = ucp_failover_seq_send_ref(seq_ep, id, header, header_length,
                                           iov, iovcnt, flags, comp);
        if (ucs_likely(status != UCS_ERR_UNSUPPORTED)) {
            return status;
        }
    }

    /* a small message is copied, so the user's buffer is free at once */
    status = ucp_failover_seq_reserve(seq_ep, length, &entry);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    memcpy(entry->data, header, header_length);
    ucp_failover_seq_iov_copy(entry->data + header_length, iov, iovcnt,
                              length - header_length);
    ucp_failover_seq_submit(seq_ep, entry, id, length);
    return UCS_OK;
}

static ucs_status_t ucp_failover_seq_ep_pending_add(uct_ep_h uct_ep,
                                                    uct_pending_req_t *req,
                                                    unsigned flags)
{
    ucp_failover_seq_ep_t *seq_ep = ucs_derived_of(uct_ep,
                                                   ucp_failover_seq_ep_t);

    ucs_status_t status;

    if (seq_ep->dead) {
        return UCS_ERR_BUSY; /* the request finds the lane failed */
    }

    if (!seq_ep->window_full && ucs_queue_is_empty(&seq_ep->pending) &&
        !ucp_failover_seq_has_backlog(seq_ep) && !seq_ep->resume_queued) {
        /* nothing waits: the request waits for the transport */
        status = uct_ep_pending_add(ucp_failover_seq_tl_ep(seq_ep),
                                    &seq_ep->resume, 0);
        if (status != UCS_OK) {
            return status; /* UCS_ERR_BUSY: it has room, try again */
        }

        seq_ep->resume_queued = 1;
        seq_ep->resume_ep     = ucp_failover_seq_tl_ep(seq_ep);
    }

    uct_pending_req_queue_push(&seq_ep->pending, req);
    ucp_failover_seq_ep_gate_close(seq_ep);
    ucp_failover_round_want(ucp_failover_ep(seq_ep->seq->ep));
    return UCS_OK;
}

void ucp_failover_seq_purge_filter(uct_pending_req_t *req, void *arg)
{
    ucp_failover_seq_purge_arg_t *purge = arg;
    ucp_failover_seq_ep_t *other;

    if (req == &purge->seq_ep->resume) {
        purge->seq_ep->resume_queued = 0;
        return;
    }

    if (req->func == ucp_failover_seq_resume_progress) {
        /* the resume request of a wrapper taken off this transport endpoint
         * while it waited here (ucp_failover_seq_dissolve) */
        other                = ucs_container_of(req, ucp_failover_seq_ep_t,
                                                resume);
        other->resume_queued = 0;
        ucs_assert(other->dead);
        ucp_failover_seq_ep_free_dead(other);
        return;
    }

    purge->cb(req, purge->arg);
}

static void
ucp_failover_seq_ep_pending_purge(uct_ep_h uct_ep,
                                  uct_pending_purge_callback_t cb, void *arg)
{
    ucp_failover_seq_ep_t *seq_ep = ucs_derived_of(uct_ep,
                                                   ucp_failover_seq_ep_t);
    ucp_failover_seq_purge_arg_t purge;
    uct_pending_req_priv_queue_t *priv;

    /* the transport endpoint's requests came first */
    purge.seq_ep = seq_ep;
    purge.cb     = cb;
    purge.arg    = arg;
    if (ucp_failover_seq_tl_ep(seq_ep) != NULL) {
        uct_ep_pending_purge(ucp_failover_seq_tl_ep(seq_ep),
                             ucp_failover_seq_purge_filter, &purge);
    }

    uct_pending_queue_purge(priv, &seq_ep->pending, 1, cb, arg);
}

static ucs_status_t ucp_failover_seq_ep_flush(uct_ep_h uct_ep, unsigned flags,
                                              uct_completion_t *comp)
{
    ucp_failover_seq_ep_t *seq_ep = ucs_derived_of(uct_ep,
                                                   ucp_failover_seq_ep_t);
    ucs_status_t status;

    if (seq_ep->dead) {
        return UCS_OK;
    }

    if (!(flags & UCT_FLUSH_FLAG_CANCEL) &&
        ((!ucs_queue_is_empty(&seq_ep->pending) && !seq_ep->dispatching) ||
         ucp_failover_seq_has_backlog(seq_ep))) {
        return UCS_ERR_NO_RESOURCE;
    }

    /* an error the transport raises in the flush is handled as in sends */
    ++seq_ep->busy;
    status = uct_ep_flush(ucp_failover_seq_tl_ep(seq_ep), flags, comp);
    --seq_ep->busy;
    if (seq_ep->dead || !UCS_STATUS_IS_ERR(status) ||
        (status == UCS_ERR_NO_RESOURCE) || (flags & UCT_FLUSH_FLAG_CANCEL) ||
        !seq_ep->failing) {
        return status;
    }

    /* The transport endpoint failed and its failover is still to come
     * (deferred because the transport reported the error inside one of our
     * calls). What was sent is retained and goes again on the next am lane,
     * so the flush waits here (the failed transport endpoint queues the
     * resume request) and moves with the pending requests; the endpoint
     * failing instead purges it with the error. */
    ucs_debug("ep %p: am lane flush deferred: %s", seq_ep->super.ucp_ep,
              ucs_status_string(status));
    return UCS_ERR_NO_RESOURCE;
}

/* Requests that waited for the window, dispatched from progress */
static unsigned ucp_failover_seq_dispatch(void *arg)
{
    ucp_failover_seq_ep_t *seq_ep = arg;
    ucp_worker_h worker           = seq_ep->super.ucp_ep->worker;

    UCS_ASYNC_BLOCK(&worker->async);
    seq_ep->dispatch_id = UCS_CALLBACKQ_ID_NULL;
    ucp_failover_seq_kick(seq_ep);
    UCS_ASYNC_UNBLOCK(&worker->async);
    return 1;
}

void ucp_failover_seq_dispatch_schedule(ucp_failover_seq_ep_t *seq_ep)
{
    ucp_worker_h worker = seq_ep->super.ucp_ep->worker;

    if (seq_ep->dispatch_id != UCS_CALLBACKQ_ID_NULL) {
        return;
    }

    uct_worker_progress_register_safe(worker->uct, ucp_failover_seq_dispatch,
                                      seq_ep, UCS_CALLBACKQ_FLAG_ONESHOT,
                                      &seq_ep->dispatch_id);
    ucp_worker_signal_internal(worker);
}

/* The limits of the transport endpoint of @a lane, as the wrapper sends */
void ucp_failover_seq_ep_limits(ucp_failover_seq_ep_t *seq_ep, ucp_ep_h ep,
                                ucp_lane_index_t lane)
{
    const uct_md_attr_t *md_attr;
    const uct_iface_attr_t *attr;

    /* the limits UCP sees are the transport's less the trailer
     * (ucp_failover_iface_attr) */
    attr              = ucp_worker_iface_get_attr(ep->worker,
                                                  ucp_ep_get_rsc_index(ep,
                                                                       lane));
    seq_ep->max_short   = (attr->cap.flags & UCT_IFACE_FLAG_AM_SHORT) ?
                          (attr->cap.am.max_short +
                           UCP_FAILOVER_SEQ_HDR_LEN) :
                          0;
    seq_ep->max_bcopy   = attr->cap.am.max_bcopy + UCP_FAILOVER_SEQ_HDR_LEN;
    ucp_failover_seq_ep_short_span(seq_ep);
    seq_ep->retain      = ep->worker->context->config.ext.multirail.retain;

    /* sending by reference adds the trailer as an iov element: with no
     * memory handle where the transport needs none, else from a registered
     * buffer (UCP is offered zero copy only then, ucp_failover_iface_attr) */
    md_attr            = ucp_ep_md_attr(ep, lane);
    seq_ep->ref_md     = (md_attr->cap.flags & UCT_MD_FLAG_NEED_MEMH) ?
                         ucp_ep_md_index(ep, lane) : UCP_NULL_RESOURCE;
    seq_ep->ref_thresh = ucp_failover_ref_thresh(ep->worker->context,
                                                 seq_ep->ref_md !=
                                                 UCP_NULL_RESOURCE);
    seq_ep->ref_iov    = ((attr->cap.flags & UCT_IFACE_FLAG_AM_ZCOPY) &&
                          ((seq_ep->ref_md == UCP_NULL_RESOURCE) ||
                           ucp_failover_pool_reg_covers(ep->worker->context,
                                                        seq_ep->ref_md))) ?
                         ucs_min(attr->cap.am.max_iov,
                                 UCP_FAILOVER_SEQ_REF_IOV) : 0;
}

/*
 * The wrapper stops sending its stream (it is destroyed, or unwrapped while
 * busy). A data stream is orphaned then: what it did not see acknowledged
 * goes again, by the am lane's wrapper (its lane failed, or became the am
 * lane; a fragment that arrives twice is dropped as a duplicate).
 */
void ucp_failover_seq_ep_detach(ucp_failover_seq_ep_t *seq_ep)
{
    ucp_failover_seq_stream_t *st = seq_ep->stream;
    uint8_t id;

    if ((seq_ep->seq != NULL) && (seq_ep->seq->seq_ep == seq_ep)) {
        seq_ep->seq->seq_ep = NULL;
    }

    seq_ep->stream = NULL;
    ucp_failover_seq_ep_gate_close(seq_ep);
    ucp_failover_pool_cancel(&seq_ep->pool_waiter);
    if ((st == NULL) || (st->seq_ep != seq_ep)) {
        return;
    }

    /* The endpoint fails: what its streams sent by reference will not go
     * again, and the users' requests complete with an error (from
     * progress), as a transport's zero-copy sends that a failed endpoint
     * cancels. (A lane that fails alone keeps them: the am lane's wrapper
     * sends them again, by reference where it can.) */
    if ((seq_ep->seq != NULL) &&
        (seq_ep->seq->ep->flags & UCP_EP_FLAG_FAILED)) {
        for (id = 0; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
            if (seq_ep->seq->streams[id] != NULL) {
                ucp_failover_seq_stream_own(seq_ep->seq,
                                            seq_ep->seq->streams[id],
                                            UCS_ERR_CANCELED);
            }
        }
    }

    st->seq_ep = NULL;
    if (st->id == 0) {
        return;
    }

    ucp_failover_seq_unsent_set(st, ucp_failover_seq_first_retained(st));
    st->orphaned   = ucs_queue_length(&st->retained);
    st->tx_resent += st->orphaned;
}

UCS_CLASS_INIT_FUNC(ucp_failover_seq_ep_t, ucp_ep_h ep, uct_ep_h tl_ep,
                    ucp_failover_seq_t *seq, ucp_failover_seq_stream_t *st,
                    ucp_lane_index_t lane)
{
    UCS_CLASS_CALL_SUPER_INIT(ucp_proxy_ep_t, &ucp_failover_seq_ep_ops, ep,
                              tl_ep, 1);
    self->seq                 = seq;
    self->stream              = st;
    self->resume.func         = ucp_failover_seq_resume_progress;
    self->resume_queued       = 0;
    self->resume_ep           = NULL;
    self->window_full         = 0;
    self->pool_waiter.waiting = 0;
    self->pool_waiter.cb      = ucp_failover_seq_pool_wake;
    self->dispatching         = 0;
    self->mem_wait            = 0;
    self->dispatch_id         = UCS_CALLBACKQ_ID_NULL;
    self->worker              = ep->worker;
    self->busy                = 0;
    self->dead                = 0;
    self->failing             = 0;
    ucp_failover_seq_ep_limits(self, ep, lane);
    ucs_queue_head_init(&self->pending);
    if (st->seq_ep != NULL) {
        /* (the stream's old wrapper goes: out of reach of
         * ucp_failover_seq_gates_close()) */
        ucp_failover_seq_ep_gate_close(st->seq_ep);
    }
    st->seq_ep          = self;
    return UCS_OK;
}

static UCS_CLASS_CLEANUP_FUNC(ucp_failover_seq_ep_t)
{
    uct_pending_req_priv_queue_t *priv;

    /* requests that waited in a wrapper unwrapped while busy: the endpoint
     * failed */
    uct_pending_queue_purge(priv, &self->pending, 1, ucp_ep_err_pending_purge,
                            UCS_STATUS_PTR(UCS_ERR_CANCELED));
    uct_worker_progress_unregister_safe(self->worker->uct, &self->dispatch_id);
    ucp_failover_seq_ep_detach(self);
}

UCS_CLASS_DEFINE(ucp_failover_seq_ep_t, ucp_proxy_ep_t);
UCS_CLASS_DEFINE_NAMED_NEW_FUNC(ucp_failover_seq_ep_create, ucp_failover_seq_ep_t,
                                uct_ep_t, ucp_ep_h, uct_ep_h,
                                ucp_failover_seq_t*,
                                ucp_failover_seq_stream_t*, ucp_lane_index_t);
static UCS_CLASS_DEFINE_NAMED_DELETE_FUNC(ucp_failover_seq_ep_destroy,
                                          ucp_failover_seq_ep_t, uct_ep_t);

static uct_iface_ops_t ucp_failover_seq_ep_ops = {
    .ep_am_short     = ucp_failover_seq_ep_am_short,
    .ep_am_short_iov = ucp_failover_seq_ep_am_short_iov,
    .ep_am_bcopy     = ucp_failover_seq_ep_am_bcopy,
    .ep_am_zcopy     = ucp_failover_seq_ep_am_zcopy,
    .ep_pending_add  = ucp_failover_seq_ep_pending_add,
    .ep_pending_purge = ucp_failover_seq_ep_pending_purge,
    .ep_flush        = ucp_failover_seq_ep_flush,
    .ep_destroy      = ucp_failover_seq_ep_destroy
};
