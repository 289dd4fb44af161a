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
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucp_failover_int.h"

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


/* Send an acknowledgement alone after this many messages, or bytes */
#define UCP_FAILOVER_SEQ_ACK_MSGS  32
#define UCP_FAILOVER_SEQ_ACK_BYTES (64 * UCS_KBYTE)

/* Retained copies up to this size (trailer included) are allocated at this
 * size, and up to UCP_FAILOVER_SEQ_CACHE released ones are kept per endpoint
 * for the next messages: a small message costs no malloc/free */
#define UCP_FAILOVER_SEQ_SMALL     256
#define UCP_FAILOVER_SEQ_CACHE     16


enum {
    UCP_FAILOVER_SEQ_FLAG_ACK_ONLY = UCS_BIT(0), /* no message, an ack */
    UCP_FAILOVER_SEQ_FLAG_ACK_REQ  = UCS_BIT(1)  /* acknowledge at once */
};


/* The trailer of a sequenced message (at its end, so the data keeps its
 * place and receive descriptors work as without it) */
typedef struct {
    uint64_t ep_id; /* the receiver's endpoint id */
    uint32_t sn;    /* sequence number, from 1; 0 with ACK_ONLY */
    uint32_t ack;   /* the sender delivered the receiver's messages up to
                       this one */
    uint8_t  am_id; /* the message's own active message id */
    uint8_t  flags; /* UCP_FAILOVER_SEQ_FLAG_* */
} UCS_S_PACKED ucp_failover_seq_hdr_t;


#define UCP_FAILOVER_SEQ_HDR_LEN sizeof(ucp_failover_seq_hdr_t)


/* A retained message */
typedef struct ucp_failover_seq_entry {
    ucs_queue_elem_t   queue;
    uct_completion_t   comp;     /* zero-copy sends of it in flight */
    ucp_failover_seq_t *seq;     /* NULL: the endpoint is gone */
    uint32_t           sn;
    uint32_t           length;   /* bytes in data[], trailer included */
    uint8_t            acked;
    uint8_t            small;    /* of size UCP_FAILOVER_SEQ_SMALL */
    uint8_t            data[];
} ucp_failover_seq_entry_t;


/* A message that arrived early */
typedef struct {
    ucs_list_link_t list;
    uint32_t        sn;
    uint8_t         am_id;
    size_t          length;
    uint8_t         data[];
} ucp_failover_seq_held_t;


/* The sequencing endpoint that wraps the am lane's transport endpoint */
typedef struct ucp_failover_seq_ep {
    ucp_proxy_ep_t     super;
    ucp_failover_seq_t *seq;
    ucs_queue_head_t   pending;       /* requests waiting for the window */
    uct_pending_req_t  resume;        /* on the transport endpoint: send the
                                         backlog when it has resources */
    int                resume_queued;
    int                window_full;
    int                dispatching;   /* running requests of 'pending' */
    uct_worker_cb_id_t dispatch_id;
    ucp_worker_h       worker;
    unsigned           busy;          /* depth of its own code on the stack */
    int                dead;          /* unwrapped while busy: freed later */
    int                failing;       /* the transport failed in our own
                                         call: its failover runs from
                                         progress */
    /* the transport's limits, trailer included, and the retention bound */
    size_t             max_short;
    size_t             max_bcopy;
    size_t             retain;
} ucp_failover_seq_ep_t;


/* Per-endpoint sequencing state */
struct ucp_failover_seq {
    ucp_ep_h                 ep;
    ucp_failover_seq_ep_t    *seq_ep;      /* on the am lane, or NULL */
    /* send side */
    uint32_t                 tx_next;      /* number of the next message */
    ucs_queue_head_t         retained;     /* not acknowledged, in order */
    ucp_failover_seq_entry_t *unsent;      /* first one not handed to the
                                              transport, or NULL */
    size_t                   retained_bytes;
    /* receive side */
    uint32_t                 rx_next;      /* number expected next */
    uint32_t                 rx_ack_sent;  /* last acknowledged to the peer */
    int                      ack_again;    /* the am lane moved: the last
                                              acknowledgement may be lost */
    size_t                   rx_unacked_bytes;
    ucs_list_link_t          held;         /* arrived early, by number */
    /* counters */
    uint64_t                 tx_msgs;
    uint64_t                 tx_resent;
    uint64_t                 rx_msgs;
    uint64_t                 rx_dups;
    uint64_t                 rx_held;
    uint64_t                 acks_sent;
    uint64_t                 acks_unsent;   /* ack-only messages the am
                                               lane did not take */
    ucs_status_t             ack_status;    /* of the last one not taken */
    uint32_t                 tx_acked;      /* highest ack received */
    size_t                   retained_max;  /* high-water mark, bytes */
    ucs_queue_head_t         cache;         /* released small entries */
    unsigned                 cache_count;
    uint32_t                 window_stalls;
};


static uct_iface_ops_t ucp_failover_seq_ep_ops;


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

    seq->ep      = ep;
    seq->tx_next = 1;
    seq->rx_next = 1;
    ucs_queue_head_init(&seq->retained);
    ucs_queue_head_init(&seq->cache);
    ucs_list_head_init(&seq->held);
    fo->seq = seq;
    return seq;
}

static UCS_F_ALWAYS_INLINE uint32_t
ucp_failover_seq_rx_delivered(const ucp_failover_seq_t *seq)
{
    return seq->rx_next - 1;
}

int ucp_failover_seq_ep_test(uct_ep_h uct_ep)
{
    return (uct_ep != NULL) &&
           (uct_ep->iface->ops.ep_destroy ==
            ucp_failover_seq_ep_ops.ep_destroy);
}

static UCS_F_ALWAYS_INLINE uct_ep_h
ucp_failover_seq_tl_ep(ucp_failover_seq_ep_t *seq_ep)
{
    return seq_ep->super.uct_ep;
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

static void ucp_failover_seq_entry_free(ucp_failover_seq_entry_t *entry)
{
    ucp_failover_seq_t *seq = entry->seq;

    if (entry->small && (seq != NULL) &&
        (seq->cache_count < UCP_FAILOVER_SEQ_CACHE)) {
        ucs_queue_push(&seq->cache, &entry->queue);
        ++seq->cache_count;
    } else {
        ucs_free(entry);
    }
}

static void ucp_failover_seq_comp_cb(uct_completion_t *self)
{
    ucp_failover_seq_entry_t *entry = ucs_container_of(self,
                                                       ucp_failover_seq_entry_t,
                                                       comp);

    /* an error needs nothing: the copy is kept until acknowledged, and the
     * lane's failover sends it again */
    if ((entry->comp.count == 0) && (entry->acked || (entry->seq == NULL))) {
        ucp_failover_seq_entry_free(entry);
    }
}

static ucp_failover_seq_entry_t *
ucp_failover_seq_entry_alloc(ucp_failover_seq_t *seq, size_t length)
{
    ucp_failover_seq_entry_t *entry;

    length += UCP_FAILOVER_SEQ_HDR_LEN;
    if (length <= UCP_FAILOVER_SEQ_SMALL) {
        if (!ucs_queue_is_empty(&seq->cache)) {
            entry = ucs_queue_pull_elem_non_empty(&seq->cache,
                                                  ucp_failover_seq_entry_t,
                                                  queue);
            --seq->cache_count;
        } else {
            entry = ucs_malloc(sizeof(*entry) + UCP_FAILOVER_SEQ_SMALL,
                               "failover_seq_entry");
            if (entry == NULL) {
                return NULL;
            }
        }
        entry->small = 1;
    } else {
        entry = ucs_malloc(sizeof(*entry) + length, "failover_seq_entry");
        if (entry == NULL) {
            return NULL;
        }
        entry->small = 0;
    }

    entry->comp.func   = ucp_failover_seq_comp_cb;
    entry->comp.count  = 0;
    entry->comp.status = UCS_OK;
    entry->seq         = seq;
    entry->acked       = 0;
    return entry;
}

static void ucp_failover_seq_dispatch_schedule(ucp_failover_seq_ep_t *seq_ep);
static ucs_status_t ucp_failover_seq_send_ack(ucp_failover_seq_t *seq);

/* The peer delivered our messages up to @a ack: release them */
static void ucp_failover_seq_release(ucp_failover_seq_t *seq, uint32_t ack)
{
    ucp_failover_seq_entry_t *entry;

    while (!ucs_queue_is_empty(&seq->retained)) {
        entry = ucs_queue_head_elem_non_empty(&seq->retained,
                                              ucp_failover_seq_entry_t, queue);
        if ((int32_t)(ack - entry->sn) < 0) {
            break;
        }

        if (entry == seq->unsent) {
            /* waiting to be sent again after a failover, but the peer has it
             * (sent on the old lane): no need to */
            seq->unsent = (seq->retained.ptail == &entry->queue.next) ?
                          NULL :
                          ucs_container_of(entry->queue.next,
                                           ucp_failover_seq_entry_t, queue);
        }

        ucs_queue_pull_non_empty(&seq->retained);
        seq->retained_bytes -= entry->length;
        entry->acked         = 1;
        if (entry->comp.count == 0) {
            ucp_failover_seq_entry_free(entry);
        } else {
            entry->seq = NULL; /* its completion frees it, not cached */
        }
    }

    if ((seq->seq_ep != NULL) && seq->seq_ep->window_full &&
        (seq->retained_bytes < seq->seq_ep->retain)) {
        seq->seq_ep->window_full = 0;
        ucp_failover_seq_dispatch_schedule(seq->seq_ep);
    }
}

/* ---------------------------------------------------------------------------
 * Sending
 */

static void ucp_failover_seq_hdr_fill(ucp_failover_seq_t *seq,
                                      ucp_failover_seq_entry_t *entry)
{
    ucp_failover_seq_hdr_t *hdr = UCS_PTR_BYTE_OFFSET(entry->data,
                                                      entry->length -
                                                      UCP_FAILOVER_SEQ_HDR_LEN);
    uint8_t flags               = 0;
    uint32_t ack;

    if (entry->comp.count > 0) {
        /* a zero-copy send of it is still reading it */
        return;
    }

    /* the acknowledgement is the current one, also when sent again */
    ack = ucp_failover_seq_rx_delivered(seq);
    if (seq->retained_bytes >= (seq->seq_ep->retain / 2)) {
        flags |= UCP_FAILOVER_SEQ_FLAG_ACK_REQ;
    }

    memcpy(&hdr->ack, &ack, sizeof(ack));
    memcpy(&hdr->flags, &flags, sizeof(flags));
    seq->rx_ack_sent      = ack;
    seq->rx_unacked_bytes = 0;
    seq->ack_again        = 0;
}

static size_t ucp_failover_seq_pack_entry(void *dest, void *arg)
{
    ucp_failover_seq_entry_t *entry = arg;

    memcpy(dest, entry->data, entry->length);
    return entry->length;
}

/* Hand a retained message to the transport endpoint */
static ucs_status_t ucp_failover_seq_tl_send(ucp_failover_seq_t *seq,
                                             uct_ep_h tl_ep,
                                             ucp_failover_seq_entry_t *entry)
{
    ucp_failover_seq_ep_t *seq_ep = seq->seq_ep;
    ucs_status_t status;
    uint64_t header;
    uct_iov_t iov;
    ssize_t packed;

    ucp_failover_seq_hdr_fill(seq, entry);
    if (entry->length <= seq_ep->max_short) {
        memcpy(&header, entry->data, sizeof(header));
        return uct_ep_am_short(tl_ep, UCP_AM_ID_FAILOVER_SEQ, header,
                               entry->data + sizeof(header),
                               entry->length - sizeof(header));
    }

    if (entry->length <= seq_ep->max_bcopy) {
        packed = uct_ep_am_bcopy(tl_ep, UCP_AM_ID_FAILOVER_SEQ,
                                 ucp_failover_seq_pack_entry, entry, 0);
        return (packed < 0) ? (ucs_status_t)packed : UCS_OK;
    }

    iov.buffer = entry->data;
    iov.length = entry->length;
    iov.memh   = UCT_MEM_HANDLE_NULL;
    iov.stride = 0;
    iov.count  = 1;
    ++entry->comp.count;
    status = uct_ep_am_zcopy(tl_ep, UCP_AM_ID_FAILOVER_SEQ, NULL, 0, &iov, 1,
                             0, &entry->comp);
    if (status != UCS_INPROGRESS) {
        --entry->comp.count;
    }

    return status;
}

/* Send the messages retained but not handed to the transport yet, in order */
static ucs_status_t ucp_failover_seq_send_backlog(ucp_failover_seq_ep_t *seq_ep)
{
    ucp_failover_seq_t *seq = seq_ep->seq;
    uct_ep_h tl_ep          = ucp_failover_seq_tl_ep(seq_ep);
    ucp_failover_seq_entry_t *entry;
    ucs_status_t status;

    while ((entry = seq->unsent) != NULL) {
        status = ucp_failover_seq_tl_send(seq, tl_ep, entry);
        if (status == UCS_ERR_NO_RESOURCE) {
            return status;
        } else if (UCS_STATUS_IS_ERR(status)) {
            /* the lane is failing: its failover sends the backlog again */
            ucs_debug("ep %p: sequenced message %u not sent: %s", seq->ep,
                      entry->sn, ucs_status_string(status));
            return status;
        }

        seq->unsent = (seq->retained.ptail == &entry->queue.next) ?
                      NULL :
                      ucs_container_of(entry->queue.next,
                                       ucp_failover_seq_entry_t, queue);
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
 */
static void ucp_failover_seq_kick(ucp_failover_seq_ep_t *seq_ep)
{
    uct_pending_req_priv_queue_t *priv;
    ucs_status_t status;
    int retries, dispatching;

    ++seq_ep->busy;
    for (retries = 0; (retries < 16) && !seq_ep->dead; ++retries) {
        status = ucp_failover_seq_send_backlog(seq_ep);
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

        if (((seq_ep->seq->unsent == NULL) &&
             (ucs_queue_is_empty(&seq_ep->pending) || seq_ep->window_full)) ||
            seq_ep->resume_queued) {
            goto out;
        }

        /* the current transport endpoint: a failover may have changed it */
        status = uct_ep_pending_add(ucp_failover_seq_tl_ep(seq_ep),
                                    &seq_ep->resume, 0);
        if (status == UCS_OK) {
            seq_ep->resume_queued = 1;
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
    --seq_ep->busy;
}

static ucs_status_t ucp_failover_seq_resume_progress(uct_pending_req_t *self)
{
    ucp_failover_seq_ep_t *seq_ep = ucs_container_of(self,
                                                     ucp_failover_seq_ep_t,
                                                     resume);

    seq_ep->resume_queued = 0;
    ucp_failover_seq_kick(seq_ep);
    return UCS_OK;
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

/*
 * Take a message for sending: reserve a retained entry of @a length bytes
 * (the trailer comes on top), or UCS_ERR_NO_RESOURCE while requests wait or
 * the retention is full. A message not sent yet (the transport had no room)
 * does not decline the next one: it is numbered after it and goes after it,
 * so the order holds, and a request the transport dispatches finds room.
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
ucp_failover_seq_reserve(ucp_failover_seq_ep_t *seq_ep, size_t length,
                         ucp_failover_seq_entry_t **entry_p)
{
    ucp_failover_seq_t *seq = seq_ep->seq;

    /* behind requests waiting: keep the order */
    if (ucs_unlikely(!ucs_queue_is_empty(&seq_ep->pending) &&
                     !seq_ep->dispatching)) {
        return ucp_failover_seq_decline(seq_ep);
    }

    if (ucs_unlikely(seq->retained_bytes >= seq_ep->retain)) {
        if (!seq_ep->window_full) {
            ++seq->window_stalls;
            seq_ep->window_full = 1;
        }
        return UCS_ERR_NO_RESOURCE;
    }

    *entry_p = ucp_failover_seq_entry_alloc(seq, length);
    if (*entry_p == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    return UCS_OK;
}

/* Number a filled entry, retain it and send it (or leave it to the backlog) */
static void ucp_failover_seq_submit(ucp_failover_seq_ep_t *seq_ep,
                                    ucp_failover_seq_entry_t *entry,
                                    uint8_t am_id, size_t length)
{
    ucp_failover_seq_t *seq = seq_ep->seq;
    ucp_failover_seq_hdr_t hdr;
    ucs_status_t status;

    hdr.ep_id     = ucp_ep_remote_id(seq->ep);
    hdr.sn        = seq->tx_next++;
    hdr.ack       = 0;
    hdr.am_id     = am_id;
    hdr.flags     = 0;
    entry->sn     = hdr.sn;
    entry->length = length + UCP_FAILOVER_SEQ_HDR_LEN;
    memcpy(entry->data + length, &hdr, sizeof(hdr));

    ucs_queue_push(&seq->retained, &entry->queue);
    seq->retained_bytes += entry->length;
    seq->retained_max    = ucs_max(seq->retained_max, seq->retained_bytes);
    ++seq->tx_msgs;

    if (seq->unsent != NULL) {
        /* after the messages not sent yet, which the queued resume request
         * sends when the transport has room */
        if (!seq_ep->dispatching && !seq_ep->resume_queued) {
            ucp_failover_seq_kick(seq_ep);
        }
        return;
    }

    ++seq_ep->busy;
    status = ucp_failover_seq_tl_send(seq, ucp_failover_seq_tl_ep(seq_ep),
                                      entry);
    --seq_ep->busy;
    if (seq_ep->dead) {
        return; /* the endpoint failed in the send */
    }

    if (status == UCS_ERR_NO_RESOURCE) {
        /* taken: it goes when the transport has room */
        seq->unsent = entry;
        if (!seq_ep->dispatching) {
            ucp_failover_seq_kick(seq_ep);
        }
    } else if (UCS_STATUS_IS_ERR(status)) {
        ucs_debug("ep %p: sequenced message %u not sent: %s", seq->ep,
                  entry->sn, ucs_status_string(status));
    }
}

static UCS_F_ALWAYS_INLINE int ucp_failover_seq_passthrough(uint8_t id)
{
    /* failover's own control messages are not sequenced: they are about
     * lanes, and must pass while the sequence is held up */
    return (id == UCP_AM_ID_FAILOVER) || (id == UCP_AM_ID_FAILOVER_SEQ);
}

static ucs_status_t
ucp_failover_seq_ep_am_short(uct_ep_h uct_ep, uint8_t id, uint64_t header,
                             const void *payload, unsigned length)
{
    ucp_failover_seq_ep_t *seq_ep = ucs_derived_of(uct_ep,
                                                   ucp_failover_seq_ep_t);
    ucp_failover_seq_entry_t *entry;
    ucs_status_t status;

    if (ucs_unlikely(ucp_failover_seq_passthrough(id))) {
        return uct_ep_am_short(ucp_failover_seq_tl_ep(seq_ep), id, header,
                               payload, length);
    }

    status = ucp_failover_seq_reserve(seq_ep, sizeof(header) + length, &entry);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    memcpy(entry->data, &header, sizeof(header));
    memcpy(entry->data + sizeof(header), payload, length);
    ucp_failover_seq_submit(seq_ep, entry, id, sizeof(header) + length);
    return UCS_OK;
}

/* Copy a UCT iov array to @a dest (UCP passes contiguous elements) */
static void ucp_failover_seq_iov_copy(void *dest, const uct_iov_t *iov,
                                      size_t iovcnt, size_t length)
{
    ucs_iov_iter_t iter;

    ucs_iov_iter_init(&iter);
    uct_iov_to_buffer(iov, iovcnt, &iter, dest, length);
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

static ssize_t ucp_failover_seq_ep_am_bcopy(uct_ep_h uct_ep, uint8_t id,
                                            uct_pack_callback_t pack_cb,
                                            void *arg, unsigned flags)
{
    ucp_failover_seq_ep_t *seq_ep = ucs_derived_of(uct_ep,
                                                   ucp_failover_seq_ep_t);
    ucp_failover_seq_entry_t *entry;
    ucs_status_t status;
    size_t max_bcopy;
    size_t length;

    if (ucs_unlikely(ucp_failover_seq_passthrough(id))) {
        return uct_ep_am_bcopy(ucp_failover_seq_tl_ep(seq_ep), id, pack_cb,
                               arg, flags);
    }

    max_bcopy = seq_ep->max_bcopy - UCP_FAILOVER_SEQ_HDR_LEN;
    status    = ucp_failover_seq_reserve(seq_ep, max_bcopy, &entry);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    length = pack_cb(entry->data, arg);
    ucs_assertv(length <= max_bcopy, "packed %zu max_bcopy %zu", length,
                max_bcopy);
    ucp_failover_seq_submit(seq_ep, entry, id, length);
    return length;
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

    /* the data is copied, so the user's buffer is free at once */
    length = header_length + uct_iov_total_length(iov, iovcnt);
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
        (seq_ep->seq->unsent == NULL) && !seq_ep->resume_queued) {
        /* nothing waits: the request waits for the transport */
        status = uct_ep_pending_add(ucp_failover_seq_tl_ep(seq_ep),
                                    &seq_ep->resume, 0);
        if (status != UCS_OK) {
            return status; /* UCS_ERR_BUSY: it has room, try again */
        }

        seq_ep->resume_queued = 1;
    }

    uct_pending_req_queue_push(&seq_ep->pending, req);
    return UCS_OK;
}

typedef struct {
    ucp_failover_seq_ep_t        *seq_ep;
    uct_pending_purge_callback_t cb;
    void                         *arg;
} ucp_failover_seq_purge_arg_t;

static void ucp_failover_seq_purge_filter(uct_pending_req_t *req, void *arg)
{
    ucp_failover_seq_purge_arg_t *purge = arg;

    if (req == &purge->seq_ep->resume) {
        purge->seq_ep->resume_queued = 0;
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
         (seq_ep->seq->unsent != NULL))) {
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

static void ucp_failover_seq_dispatch_schedule(ucp_failover_seq_ep_t *seq_ep)
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
static void ucp_failover_seq_ep_limits(ucp_failover_seq_ep_t *seq_ep,
                                       ucp_ep_h ep, ucp_lane_index_t lane)
{
    const uct_iface_attr_t *attr;

    /* the limits UCP sees are the transport's less the trailer
     * (ucp_failover_iface_attr) */
    attr              = ucp_worker_iface_get_attr(ep->worker,
                                                  ucp_ep_get_rsc_index(ep,
                                                                       lane));
    seq_ep->max_short = (attr->cap.flags & UCT_IFACE_FLAG_AM_SHORT) ?
                        (attr->cap.am.max_short + UCP_FAILOVER_SEQ_HDR_LEN) :
                        0;
    seq_ep->max_bcopy = attr->cap.am.max_bcopy + UCP_FAILOVER_SEQ_HDR_LEN;
    seq_ep->retain    = ep->worker->context->config.ext.multirail.retain;
}

UCS_CLASS_INIT_FUNC(ucp_failover_seq_ep_t, ucp_ep_h ep, uct_ep_h tl_ep,
                    ucp_failover_seq_t *seq)
{
    UCS_CLASS_CALL_SUPER_INIT(ucp_proxy_ep_t, &ucp_failover_seq_ep_ops, ep,
                              tl_ep, 1);
    self->seq           = seq;
    self->resume.func   = ucp_failover_seq_resume_progress;
    self->resume_queued = 0;
    self->window_full   = 0;
    self->dispatching   = 0;
    self->dispatch_id   = UCS_CALLBACKQ_ID_NULL;
    self->worker        = ep->worker;
    self->busy          = 0;
    self->dead          = 0;
    self->failing       = 0;
    ucp_failover_seq_ep_limits(self, ep, ucp_ep_get_am_lane(ep));
    ucs_queue_head_init(&self->pending);
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
    if ((self->seq != NULL) && (self->seq->seq_ep == self)) {
        self->seq->seq_ep = NULL;
    }
}

UCS_CLASS_DEFINE(ucp_failover_seq_ep_t, ucp_proxy_ep_t);
static UCS_CLASS_DEFINE_NAMED_NEW_FUNC(ucp_failover_seq_ep_create,
                                       ucp_failover_seq_ep_t, uct_ep_t,
                                       ucp_ep_h, uct_ep_h,
                                       ucp_failover_seq_t*);
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
}

void ucp_failover_seq_ep_connected(ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    ucp_lane_index_t am_lane;
    ucp_failover_seq_t *seq;
    ucs_status_t status;
    uct_ep_h tl_ep, seq_ep;

    if (!(fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) ||
        ((fo->seq != NULL) && (fo->seq->seq_ep != NULL)) ||
        ((ep->flags & (UCP_EP_FLAG_REMOTE_ID | UCP_EP_FLAG_FAILED |
                       UCP_EP_FLAG_CLOSED | UCP_EP_FLAG_REMOTE_CONNECTED)) !=
         (UCP_EP_FLAG_REMOTE_ID | UCP_EP_FLAG_REMOTE_CONNECTED)) ||
        (ep->cfg_index == UCP_WORKER_CFG_INDEX_NULL)) {
        return;
    }

    am_lane = ucp_ep_get_am_lane(ep);
    if ((am_lane == UCP_NULL_LANE) || (fo->failed_lanes & UCS_BIT(am_lane))) {
        return;
    }

    tl_ep = ep->uct_eps[am_lane];
    if ((tl_ep == NULL) || (tl_ep == &ucp_failed_tl_ep) ||
        ucp_wireup_ep_test(tl_ep) || ucp_proxy_ep_test(tl_ep)) {
        return; /* not connected yet: a later call installs it */
    }

    seq = ucp_failover_seq_get(ep);
    if (seq == NULL) {
        return;
    }

    status = ucp_failover_seq_ep_create(ep, tl_ep, seq, &seq_ep);
    if (status != UCS_OK) {
        ucs_error("ep %p: cannot create the sequencing endpoint: %s", ep,
                  ucs_status_string(status));
        return;
    }

    seq->seq_ep          = ucs_derived_of(seq_ep, ucp_failover_seq_ep_t);
    ep->uct_eps[am_lane] = seq_ep;
    ucs_debug("ep %p: am lane[%d] sequenced from message %u", ep, am_lane,
              seq->tx_next);

    /* requests already waiting on the transport wait here, in order */
    uct_ep_pending_purge(tl_ep, ucp_failover_seq_adopt_cb, seq->seq_ep);
    if (!ucs_queue_is_empty(&seq->seq_ep->pending)) {
        ucp_failover_seq_kick(seq->seq_ep);
    }
}

static unsigned ucp_failover_seq_ep_release(void *arg)
{
    uct_ep_destroy(arg);
    return 1;
}

uct_ep_h ucp_failover_seq_unwrap(uct_ep_h uct_ep)
{
    ucp_failover_seq_ep_t *seq_ep;
    uct_worker_cb_id_t cb_id = UCS_CALLBACKQ_ID_NULL;
    uct_ep_h tl_ep;

    if (!ucp_failover_seq_ep_test(uct_ep)) {
        return uct_ep;
    }

    seq_ep = ucs_derived_of(uct_ep, ucp_failover_seq_ep_t);
    tl_ep  = ucp_proxy_ep_extract(uct_ep);
    if (seq_ep->busy == 0) {
        uct_ep_destroy(uct_ep);
        return tl_ep;
    }

    /* unwrapped from inside its own send (the transport failed the send
     * and the endpoint failed): detached now, freed from progress */
    seq_ep->dead = 1;
    if (seq_ep->seq->seq_ep == seq_ep) {
        seq_ep->seq->seq_ep = NULL;
    }
    seq_ep->seq = NULL;
    uct_worker_progress_unregister_safe(seq_ep->worker->uct,
                                        &seq_ep->dispatch_id);
    uct_worker_progress_register_safe(seq_ep->worker->uct,
                                      ucp_failover_seq_ep_release, uct_ep,
                                      UCS_CALLBACKQ_FLAG_ONESHOT, &cb_id);
    return tl_ep;
}

void ucp_failover_seq_cleanup(ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    ucp_failover_seq_t *seq = fo->seq;
    ucp_failover_seq_entry_t *entry;
    ucp_failover_seq_held_t *held, *tmp;

    if (seq == NULL) {
        return;
    }

    if (seq->seq_ep != NULL) {
        /* its lanes were not destroyed (an error path): keep the state */
        ucs_warn("ep %p: sequencing endpoint %p outlives the endpoint", ep,
                 seq->seq_ep);
        return;
    }

    ucs_queue_for_each_extract(entry, &seq->retained, queue, 1) {
        entry->seq = NULL; /* not cached */
        if (entry->comp.count == 0) {
            ucp_failover_seq_entry_free(entry);
        } /* else its completion frees it */
    }

    ucs_queue_for_each_extract(entry, &seq->cache, queue, 1) {
        ucs_free(entry);
    }

    ucs_list_for_each_safe(held, tmp, &seq->held, list) {
        ucs_free(held);
    }

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
    ucp_failover_seq_t *seq  = ucp_failover_ep(ep)->seq;
    uct_worker_cb_id_t cb_id = UCS_CALLBACKQ_ID_NULL;
    ucp_failover_seq_deferred_t *d;

    if ((seq == NULL) || (seq->seq_ep == NULL) || (seq->seq_ep->busy == 0) ||
        (lane != ucp_ep_get_am_lane(ep))) {
        return 0;
    }

    /* The am lane failed inside the wrapper's own send (the transport
     * reported it synchronously): moving the wrapper and replaying its
     * waiting requests now would let them overtake the request being sent.
     * Fail the lane over from progress; meanwhile what is sent is retained
     * and sent again then. */
    d = ucs_malloc(sizeof(*d), "failover_seq_deferred");
    if (d == NULL) {
        return 0;
    }

    seq->seq_ep->failing = 1;

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
    ucp_failover_seq_entry_t *entry;
    uct_pending_req_priv_queue_t *priv;
    ucp_failover_seq_purge_arg_t purge;
    UCS_STRING_BUFFER_ONSTACK(desc, 128);
    uct_ep_h old_tl_ep;
    unsigned count = 0;

    ucs_assert(ep->uct_eps[old_lane] == &seq_ep->super.super);
    ucs_assert(!ucp_failover_seq_ep_test(ep->uct_eps[new_lane]));

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

    /* the sequencing endpoint takes the new lane's transport endpoint; the
     * caller discards the old one */
    ucp_proxy_ep_set_uct_ep(&seq_ep->super, ep->uct_eps[new_lane], 1,
                            ucp_ep_get_rsc_index(ep, new_lane));
    ep->uct_eps[new_lane] = &seq_ep->super.super;
    ep->uct_eps[old_lane] = old_tl_ep;
    ucp_failover_seq_ep_limits(seq_ep, ep, new_lane);


    /* everything not acknowledged goes again, first, in order */
    ucs_queue_for_each(entry, &seq->retained, queue) {
        ++count;
    }

    /* Acknowledgements went on the old lane too, unretained: the last ones
     * may be lost with it (the peer's retained messages then fill its
     * window, and it waits for good). Acknowledge again on the new lane:
     * the messages sent again carry it, else an ack-only message does. */
    seq->ack_again  = 1;
    seq->tx_resent += count;
    seq->unsent     = ucs_queue_is_empty(&seq->retained) ? NULL :
                      ucs_queue_head_elem_non_empty(&seq->retained,
                                                    ucp_failover_seq_entry_t,
                                                    queue);
    ucs_string_buffer_appendf(&desc, "lane[%d] ", old_lane);
    ucp_ep_get_lane_info_str(ep, old_lane, &desc);
    ucs_string_buffer_appendf(&desc, " to lane[%d] ", new_lane);
    ucp_ep_get_lane_info_str(ep, new_lane, &desc);
    ucs_info("ep %p: am lane moved from %s; %u message(s) not acknowledged "
             "are sent again (%u..%u)", ep, ucs_string_buffer_cstr(&desc),
             count, (seq->unsent != NULL) ? seq->unsent->sn : 0,
             seq->tx_next - 1);
    return old_tl_ep;
}

void ucp_failover_seq_resend(ucp_ep_h ep)
{
    ucp_failover_seq_t *seq = ucp_failover_ep(ep)->seq;

    if ((seq != NULL) && (seq->seq_ep != NULL)) {
        ucp_failover_seq_kick(seq->seq_ep);
        if (seq->ack_again) {
            /* nothing carried it: on its own (else the next probe round) */
            ucp_failover_seq_send_ack(seq);
        }
    }
}

/* ---------------------------------------------------------------------------
 * Receiving
 */

static ucs_status_t ucp_failover_seq_send_ack(ucp_failover_seq_t *seq)
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

    hdr.ep_id = ucp_ep_remote_id(ep);
    hdr.sn    = 0;
    hdr.ack   = ucp_failover_seq_rx_delivered(seq);
    hdr.am_id = 0;
    hdr.flags = UCP_FAILOVER_SEQ_FLAG_ACK_ONLY;
    status    = uct_ep_am_short(uct_ep, UCP_AM_ID_FAILOVER_SEQ, hdr.ep_id,
                                UCS_PTR_BYTE_OFFSET(&hdr, sizeof(hdr.ep_id)),
                                sizeof(hdr) - sizeof(hdr.ep_id));
    if (status == UCS_OK) {
        seq->rx_ack_sent      = hdr.ack;
        seq->rx_unacked_bytes = 0;
        seq->ack_again        = 0;
        ++seq->acks_sent;
    } else {
        ++seq->acks_unsent;
        seq->ack_status = status;
    }

    return status;
}

void ucp_failover_seq_round(ucp_ep_h ep)
{
    ucp_failover_seq_t *seq = ucp_failover_ep(ep)->seq;

    if (seq == NULL) {
        return;
    }

    /* acknowledgements not sent yet, and a backlog that waits for a lane */
    if ((seq->rx_ack_sent != ucp_failover_seq_rx_delivered(seq)) ||
        seq->ack_again) {
        ucp_failover_seq_send_ack(seq);
    }

    if ((seq->seq_ep != NULL) &&
        ((seq->unsent != NULL) || !ucs_queue_is_empty(&seq->seq_ep->pending))) {
        ucp_failover_seq_kick(seq->seq_ep);
    }
}

static ucs_status_t ucp_failover_seq_deliver(ucp_worker_h worker, uint8_t id,
                                             void *data, size_t length,
                                             unsigned flags)
{
    if ((id < UCP_AM_ID_FIRST) || (id >= UCP_AM_ID_LAST) ||
        ucp_failover_seq_passthrough(id) || (ucp_am_handlers[id] == NULL) ||
        (ucp_am_handlers[id]->cb == NULL) ||
        !(worker->context->config.features & ucp_am_handlers[id]->features)) {
        ucs_diag("worker %p: dropping sequenced message with id %d", worker,
                 id);
        return UCS_OK;
    }

    return ucp_am_handlers[id]->cb(worker, data, length, flags);
}

static void ucp_failover_seq_hold(ucp_failover_seq_t *seq,
                                  const ucp_failover_seq_hdr_t *hdr,
                                  const void *data, size_t length)
{
    ucp_failover_seq_held_t *held, *pos;

    ucs_list_for_each(pos, &seq->held, list) {
        if (pos->sn == hdr->sn) {
            ++seq->rx_dups; /* held already */
            return;
        }
    }

    held = ucs_malloc(sizeof(*held) + length, "failover_seq_held");
    if (held == NULL) {
        /* dropped: the sender sends it again only after a failover */
        ucs_error("ep %p: no memory to hold back message %u", seq->ep,
                  hdr->sn);
        return;
    }

    held->sn     = hdr->sn;
    held->am_id  = hdr->am_id;
    held->length = length;
    memcpy(held->data, data, length);
    ++seq->rx_held;

    /* in order of numbers */
    ucs_list_for_each(pos, &seq->held, list) {
        if ((int32_t)(pos->sn - held->sn) > 0) {
            ucs_list_insert_before(&pos->list, &held->list);
            return;
        }
    }

    ucs_list_add_tail(&seq->held, &held->list);
}

static void ucp_failover_seq_deliver_held(ucp_failover_seq_t *seq)
{
    ucp_worker_h worker = seq->ep->worker;
    ucp_failover_seq_held_t *held;
    ucs_status_t status;

    while (!ucs_list_is_empty(&seq->held)) {
        held = ucs_list_head(&seq->held, ucp_failover_seq_held_t, list);
        if (held->sn != seq->rx_next) {
            break;
        }

        ucs_list_del(&held->list);
        ++seq->rx_next;
        ++seq->rx_msgs;
        seq->rx_unacked_bytes += held->length;
        status = ucp_failover_seq_deliver(worker, held->am_id, held->data,
                                          held->length, 0);
        ucs_assert(status != UCS_INPROGRESS);
        ucs_free(held);
    }
}

ucs_status_t ucp_failover_seq_rx(ucp_worker_h worker, void *data,
                                 size_t length, unsigned flags,
                                 ucp_failover_seq_t **seq_p)
{
    ucp_failover_seq_hdr_t hdr;
    ucp_failover_seq_t *seq;
    ucs_status_t status;
    ucp_ep_h ep;
    int32_t diff;

    *seq_p = NULL;
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
            ucs_diag("worker %p: dropping sequenced message %u (id %d) for "
                     "endpoint 0x%" PRIx64 ", which is gone", worker, hdr.sn,
                     hdr.am_id, hdr.ep_id);
        }
        return UCS_OK;
    }

    seq = ucp_failover_seq_get(ep);
    if (seq == NULL) {
        return ucp_failover_seq_deliver(worker, hdr.am_id, data, length,
                                        flags);
    }

    if ((int32_t)(hdr.ack - seq->tx_acked) > 0) {
        seq->tx_acked = hdr.ack;
    }

    ucp_failover_seq_release(seq, hdr.ack);
    if (hdr.flags & UCP_FAILOVER_SEQ_FLAG_ACK_ONLY) {
        return UCS_OK;
    }

    diff = (int32_t)(hdr.sn - seq->rx_next);
    if (diff < 0) {
        /* delivered already (sent again after a failover) */
        ++seq->rx_dups;
        *seq_p = seq;
        return UCS_OK;
    } else if (diff > 0) {
        ucp_failover_seq_hold(seq, &hdr, data, length);
        return UCS_OK;
    }

    ++seq->rx_next;
    ++seq->rx_msgs;
    seq->rx_unacked_bytes += length;
    status = ucp_failover_seq_deliver(worker, hdr.am_id, data, length, flags);
    if (ucs_unlikely(!ucs_list_is_empty(&seq->held))) {
        ucp_failover_seq_deliver_held(seq);
    }

    if ((hdr.flags & UCP_FAILOVER_SEQ_FLAG_ACK_REQ) ||
        ((ucp_failover_seq_rx_delivered(seq) - seq->rx_ack_sent) >=
         UCP_FAILOVER_SEQ_ACK_MSGS) ||
        (seq->rx_unacked_bytes >= UCP_FAILOVER_SEQ_ACK_BYTES)) {
        *seq_p = seq;
    }

    return status;
}

static ucs_status_t
ucp_failover_seq_handler(void *arg, void *data, size_t length, unsigned flags)
{
    ucp_worker_h worker = arg;
    ucp_failover_seq_t *seq;
    ucs_status_t status;

    status = ucp_failover_seq_rx(worker, data, length, flags, &seq);
    if (seq != NULL) {
        /* a batch, a request, or a duplicate (the sender's acks were lost) */
        ucp_failover_seq_send_ack(seq);
    }

    return status;
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
    snprintf(buffer, max, "FAILOVER_SEQ ep 0x%" PRIx64 " sn %u ack %u id %d "
             "flags 0x%x", hdr.ep_id, hdr.sn, hdr.ack, hdr.am_id, hdr.flags);
}

UCP_DEFINE_AM(UINT64_MAX, UCP_AM_ID_FAILOVER_SEQ, ucp_failover_seq_handler,
              ucp_failover_seq_dump, 0);

/* ---------------------------------------------------------------------------
 * Interface limits, information
 */

void ucp_failover_iface_attr(ucp_worker_h worker, uct_iface_attr_t *attr)
{
    const size_t hdr_len = UCP_FAILOVER_SEQ_HDR_LEN;

    if (!ucp_failover_is_enabled(worker->context)) {
        return;
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
}

uint32_t ucp_failover_seq_rx_expected(ucp_ep_h ep)
{
    ucp_failover_seq_t *seq = ucp_failover_ep(ep)->seq;

    return (seq == NULL) ? 0 : seq->rx_next;
}

size_t ucp_failover_seq_hdr_len(void)
{
    return UCP_FAILOVER_SEQ_HDR_LEN;
}

void ucp_failover_seq_pack_hdr(void *dest, uint64_t ep_id, uint32_t sn,
                               uint8_t am_id)
{
    ucp_failover_seq_hdr_t hdr = {ep_id, sn, 0, am_id, 0};

    memcpy(dest, &hdr, sizeof(hdr));
}

void ucp_failover_seq_info(ucp_ep_h ep, ucs_string_buffer_t *strb)
{
    ucp_failover_seq_t *seq = ucp_failover_ep(ep)->seq;

    if (seq == NULL) {
        ucs_string_buffer_appendf(strb, "not sequenced");
        return;
    }

    ucs_string_buffer_appendf(strb,
                              "sequenced %s: sent %" PRIu64 " (%" PRIu64
                              " sent again, %zu bytes retained, at most %zu, "
                              "%u stall(s)), received %" PRIu64 " (%" PRIu64
                              " duplicate(s), %" PRIu64 " held back), %" PRIu64
                              " ack(s) sent alone",
                              (seq->seq_ep != NULL) ? "on" : "off",
                              seq->tx_msgs, seq->tx_resent,
                              seq->retained_bytes, seq->retained_max,
                              seq->window_stalls, seq->rx_msgs, seq->rx_dups,
                              seq->rx_held, seq->acks_sent);

    /* where the sequence stands (a stalled endpoint shows why) */
    ucs_string_buffer_appendf(strb, "; next %u, acknowledged up to %u, "
                              "oldest unacknowledged %u, first unsent %u, "
                              "expecting %u, acknowledged to the peer up to "
                              "%u, %" PRIu64 " ack(s) not taken (%s), %zu "
                              "held", seq->tx_next, seq->tx_acked,
                              ucs_queue_is_empty(&seq->retained) ? 0 :
                              ucs_queue_head_elem_non_empty(
                                      &seq->retained, ucp_failover_seq_entry_t,
                                      queue)->sn,
                              (seq->unsent != NULL) ? seq->unsent->sn : 0,
                              seq->rx_next, seq->rx_ack_sent, seq->acks_unsent,
                              ucs_status_string(seq->ack_status),
                              ucs_list_length(&seq->held));
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
}
