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


/* Streams: 0 is the am lane's ordered stream, 1 + lane a data stream */
#define UCP_FAILOVER_SEQ_STREAMS   (UCP_MAX_LANES + 1)


/* The trailer of a sequenced message (at its end, so the data keeps its
 * place and receive descriptors work as without it) */
typedef struct {
    uint64_t ep_id;  /* the receiver's endpoint id */
    uint32_t sn;     /* sequence number in the stream, from 1; 0 with
                        ACK_ONLY */
    uint32_t ack;    /* the sender delivered the receiver's messages up to
                        this one: of stream 0, or with ACK_ONLY of 'stream' */
    uint8_t  am_id;  /* the message's own active message id */
    uint8_t  flags;  /* UCP_FAILOVER_SEQ_FLAG_* */
    uint8_t  stream; /* the stream of sn, and of ack with ACK_ONLY */
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
    uint8_t         flags;  /* of its trailer */
    size_t          length;
    uint8_t         data[];
} ucp_failover_seq_held_t;


/* One direction's stream pair: what this side sends in stream 'id', and
 * what it receives in the peer's stream 'id' */
typedef struct ucp_failover_seq_stream {
    uint8_t                      id;
    /* send side */
    struct ucp_failover_seq_ep   *seq_ep;      /* the wrapper that sends it;
                                                  NULL: a data stream whose
                                                  lane is gone (the am lane's
                                                  wrapper sends its backlog) */
    uint32_t                     tx_next;      /* number of the next message */
    ucs_queue_head_t             retained;     /* not acknowledged, in order */
    struct ucp_failover_seq_entry *unsent;     /* first one not handed to the
                                                  transport, or NULL */
    size_t                       retained_bytes;
    uint32_t                     tx_acked;     /* highest ack received */
    size_t                       retained_max; /* high-water mark, bytes */
    uint64_t                     tx_msgs;
    uint64_t                     tx_resent;
    uint32_t                     window_stalls;
    unsigned                     orphaned;     /* fragments to send again
                                                  since its lane went, not
                                                  logged yet */
    /* receive side */
    uint32_t                     rx_next;      /* number expected next */
    uint32_t                     rx_ack_sent;  /* last acknowledged */
    int                          ack_again;    /* the am lane moved: the last
                                                  acknowledgement may be
                                                  lost */
    size_t                       rx_unacked_bytes;
    ucs_list_link_t              held;         /* arrived early, by number */
    uint64_t                     rx_msgs;
    uint64_t                     rx_dups;
    uint64_t                     rx_held;
    uint64_t                     acks_sent;
    uint64_t                     acks_unsent;  /* ack-only messages the am
                                                  lane did not take */
    ucs_status_t                 ack_status;   /* of the last one not taken */
} ucp_failover_seq_stream_t;


/* The sequencing endpoint that wraps a lane's transport endpoint: the am
 * lane's (stream 0), or a data lane's (its data stream) */
typedef struct ucp_failover_seq_ep {
    ucp_proxy_ep_t     super;
    ucp_failover_seq_t *seq;
    ucp_failover_seq_stream_t *stream;
    ucs_queue_head_t   pending;       /* requests waiting for the window */
    uct_pending_req_t  resume;        /* on the transport endpoint: send the
                                         backlog when it has resources */
    int                resume_queued;
    uct_ep_h           resume_ep;     /* the transport endpoint whose queue
                                         holds 'resume' */
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
    size_t             retain_half;   /* ask for an acknowledgement from
                                         here on */
} ucp_failover_seq_ep_t;


/* Per-endpoint sequencing state */
struct ucp_failover_seq {
    ucp_ep_h                  ep;
    ucp_failover_seq_ep_t     *seq_ep;     /* on the am lane, or NULL */
    ucp_failover_seq_stream_t main;        /* stream 0 */
    /* by id: &main, then the data streams used so far */
    ucp_failover_seq_stream_t *streams[UCP_FAILOVER_SEQ_STREAMS];
    ucs_queue_head_t          cache;       /* released small entries */
    unsigned                  cache_count;
    uint64_t                  am_ids;      /* ids a message may carry: a
                                              handler of the context's
                                              features, not failover's */
};


static uct_iface_ops_t ucp_failover_seq_ep_ops;


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
static uint64_t ucp_failover_seq_am_ids(ucp_context_h context)
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
    ucp_failover_seq_stream_init(&seq->main, 0);
    seq->streams[0] = &seq->main;
    ucs_queue_head_init(&seq->cache);
    fo->seq = seq;
    return seq;
}

/* Data stream @a id, created on first use (NULL: no memory) */
static ucp_failover_seq_stream_t *
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

static UCS_F_ALWAYS_INLINE uint32_t
ucp_failover_seq_rx_delivered(const ucp_failover_seq_stream_t *st)
{
    return st->rx_next - 1;
}

static UCS_F_ALWAYS_INLINE int
ucp_failover_seq_ack_owed(const ucp_failover_seq_stream_t *st)
{
    return (st->rx_ack_sent != ucp_failover_seq_rx_delivered(st)) ||
           st->ack_again;
}

/* The first retained message of @a st (to send again), or NULL */
static UCS_F_ALWAYS_INLINE struct ucp_failover_seq_entry *
ucp_failover_seq_first_retained(ucp_failover_seq_stream_t *st)
{
    return ucs_queue_is_empty(&st->retained) ? NULL :
           ucs_queue_head_elem_non_empty(&st->retained,
                                         struct ucp_failover_seq_entry, queue);
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
        /* kept whole for the next message (entry_alloc); an error of an
         * earlier zero-copy send of it is forgotten */
        entry->comp.status = UCS_OK;
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
ucp_failover_seq_entry_new(ucp_failover_seq_t *seq, size_t size)
{
    ucp_failover_seq_entry_t *entry;

    entry = ucs_malloc(sizeof(*entry) + size, "failover_seq_entry");
    if (entry == NULL) {
        return NULL;
    }

    entry->comp.func   = ucp_failover_seq_comp_cb;
    entry->comp.count  = 0;
    entry->comp.status = UCS_OK;
    entry->seq         = seq;
    entry->small       = (size == UCP_FAILOVER_SEQ_SMALL);
    return entry;
}

static UCS_F_ALWAYS_INLINE ucp_failover_seq_entry_t *
ucp_failover_seq_entry_alloc(ucp_failover_seq_t *seq, size_t length)
{
    ucp_failover_seq_entry_t *entry;

    length += UCP_FAILOVER_SEQ_HDR_LEN;
    if (ucs_likely(length <= UCP_FAILOVER_SEQ_SMALL) &&
        ucs_likely(!ucs_queue_is_empty(&seq->cache))) {
        /* a cached entry is whole: its completion is idle (count 0) and it
         * belongs to this endpoint's state */
        entry = ucs_queue_pull_elem_non_empty(&seq->cache,
                                              ucp_failover_seq_entry_t, queue);
        --seq->cache_count;
    } else {
        entry = ucp_failover_seq_entry_new(seq,
                                           ucs_max(length,
                                                   UCP_FAILOVER_SEQ_SMALL));
        if (entry == NULL) {
            return NULL;
        }
    }

    entry->acked = 0;
    return entry;
}

static void ucp_failover_seq_dispatch_schedule(ucp_failover_seq_ep_t *seq_ep);
static ucs_status_t ucp_failover_seq_send_ack(ucp_failover_seq_t *seq,
                                              ucp_failover_seq_stream_t *st);

/* The entry after @a entry in its stream's retention, or NULL */
static UCS_F_ALWAYS_INLINE ucp_failover_seq_entry_t *
ucp_failover_seq_next(ucp_failover_seq_stream_t *st,
                      ucp_failover_seq_entry_t *entry)
{
    return (st->retained.ptail == &entry->queue.next) ?
           NULL :
           ucs_container_of(entry->queue.next, ucp_failover_seq_entry_t,
                            queue);
}

/* Release the messages of @a st up to @a ack, newer than tx_acked */
static void ucp_failover_seq_release_upto(ucp_failover_seq_stream_t *st,
                                          uint32_t ack)
{
    ucp_failover_seq_entry_t *entry;

    st->tx_acked = ack;
    while (!ucs_queue_is_empty(&st->retained)) {
        entry = ucs_queue_head_elem_non_empty(&st->retained,
                                              ucp_failover_seq_entry_t, queue);
        if ((int32_t)(ack - entry->sn) < 0) {
            break;
        }

        if (entry == st->unsent) {
            /* waiting to be sent again after a failover, but the peer has it
             * (sent on the old lane): no need to */
            st->unsent = ucp_failover_seq_next(st, entry);
        }

        ucs_queue_pull_non_empty(&st->retained);
        st->retained_bytes -= entry->length;
        entry->acked        = 1;
        if (entry->comp.count == 0) {
            ucp_failover_seq_entry_free(entry);
        } else {
            entry->seq = NULL; /* its completion frees it, not cached */
        }
    }

    if ((st->seq_ep != NULL) && st->seq_ep->window_full &&
        (st->retained_bytes < st->seq_ep->retain)) {
        st->seq_ep->window_full = 0;
        ucp_failover_seq_dispatch_schedule(st->seq_ep);
    }
}

/*
 * The peer delivered our messages of @a st up to @a ack: release them. An
 * acknowledgement not newer than the last one releases nothing: what it
 * covers was released then (the peer never acknowledges past tx_next - 1),
 * and the window stays as it is (window_full implies retained_bytes >=
 * retain, which only a release lowers).
 */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_release(ucp_failover_seq_stream_t *st, uint32_t ack)
{
    if ((int32_t)(ack - st->tx_acked) > 0) {
        ucp_failover_seq_release_upto(st, ack);
    }
}

/* ---------------------------------------------------------------------------
 * Sending
 */

/*
 * The acknowledgement a message of @a st carries (of stream 0: the current
 * one, also when the message is sent again) and its flags (a request for an
 * acknowledgement is about the message's own stream). Sent on the am lane,
 * it counts as sent; a data lane's copy may be lost with that lane (which
 * then fails without moving the am lane), so it does not count.
 */
static UCS_F_ALWAYS_INLINE uint8_t
ucp_failover_seq_ack_take(ucp_failover_seq_ep_t *seq_ep,
                          const ucp_failover_seq_stream_t *st, uint32_t *ack_p)
{
    ucp_failover_seq_t *seq = seq_ep->seq;
    uint32_t ack            = ucp_failover_seq_rx_delivered(&seq->main);

    *ack_p = ack;
    if (ucs_likely(seq_ep == seq->seq_ep)) {
        seq->main.rx_ack_sent      = ack;
        seq->main.rx_unacked_bytes = 0;
        seq->main.ack_again        = 0;
    }

    return (st->retained_bytes >= seq_ep->retain_half) ?
           UCP_FAILOVER_SEQ_FLAG_ACK_REQ : 0;
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
    uint8_t flags;
    uint32_t ack;

    if (entry->comp.count > 0) {
        /* a zero-copy send of it is still reading it */
        return;
    }

    flags = ucp_failover_seq_ack_take(seq_ep, st, &ack);
    memcpy(&hdr->ack, &ack, sizeof(ack));
    memcpy(&hdr->flags, &flags, sizeof(flags));
}

static size_t ucp_failover_seq_pack_entry(void *dest, void *arg)
{
    ucp_failover_seq_entry_t *entry = arg;

    memcpy(dest, entry->data, entry->length);
    return entry->length;
}

/* Hand a retained message, its trailer filled, to the transport endpoint of
 * @a seq_ep */
static UCS_F_ALWAYS_INLINE ucs_status_t
ucp_failover_seq_tl_post(ucp_failover_seq_ep_t *seq_ep,
                         ucp_failover_seq_entry_t *entry)
{
    uct_ep_h tl_ep = ucp_failover_seq_tl_ep(seq_ep);
    ucs_status_t status;
    uint64_t header;
    uct_iov_t iov;
    ssize_t packed;

    if (ucs_likely(entry->length <= seq_ep->max_short)) {
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

/* Hand a retained message of @a st to the transport endpoint of @a seq_ep,
 * with the current acknowledgement */
static ucs_status_t ucp_failover_seq_tl_send(ucp_failover_seq_ep_t *seq_ep,
                                             ucp_failover_seq_stream_t *st,
                                             ucp_failover_seq_entry_t *entry)
{
    ucp_failover_seq_hdr_fill(seq_ep, st, entry);
    return ucp_failover_seq_tl_post(seq_ep, entry);
}

/* Whether @a st is a data stream whose lane is gone: the am lane's wrapper
 * sends its backlog */
static UCS_F_ALWAYS_INLINE int
ucp_failover_seq_orphan(const ucp_failover_seq_stream_t *st)
{
    return (st != NULL) && (st->id != 0) && (st->seq_ep == NULL);
}

/* Whether @a seq_ep has messages retained but not handed to the transport:
 * of its stream, and for the am lane's, of the orphaned data streams */
static int ucp_failover_seq_has_backlog(ucp_failover_seq_ep_t *seq_ep)
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
        status = ucp_failover_seq_tl_send(seq_ep, st, entry);
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

        st->unsent = ucp_failover_seq_next(st, entry);
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

        if ((!ucp_failover_seq_has_backlog(seq_ep) &&
             (ucs_queue_is_empty(&seq_ep->pending) || seq_ep->window_full)) ||
            seq_ep->resume_queued) {
            goto out;
        }

        /* the current transport endpoint: a failover may have changed it */
        tl_ep = ucp_failover_seq_tl_ep(seq_ep);
        if (tl_ep == queued_on) {
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
    --seq_ep->busy;
    return ret;
}

static void ucp_failover_seq_kick(ucp_failover_seq_ep_t *seq_ep)
{
    (void)ucp_failover_seq_kick_from(seq_ep, NULL);
}

static unsigned ucp_failover_seq_ep_release(void *arg)
{
    uct_ep_destroy(arg);
    return 1;
}

/* Free a dead wrapper, from progress if it is in one of its own calls */
static void ucp_failover_seq_ep_free_dead(ucp_failover_seq_ep_t *seq_ep)
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

    if (ucs_unlikely(st->retained_bytes >= seq_ep->retain)) {
        if (!seq_ep->window_full) {
            ++st->window_stalls;
            seq_ep->window_full = 1;
        }
        return UCS_ERR_NO_RESOURCE;
    }

    *entry_p = ucp_failover_seq_entry_alloc(seq_ep->seq, length);
    if (*entry_p == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    return UCS_OK;
}

/* The transport did not take a new message: it goes after the backlog, when
 * the transport has room; or the lane is failing */
static void ucp_failover_seq_submit_unsent(ucp_failover_seq_ep_t *seq_ep,
                                           ucp_failover_seq_entry_t *entry,
                                           ucs_status_t status)
{
    if (status == UCS_ERR_NO_RESOURCE) {
        seq_ep->stream->unsent = entry;
        if (!seq_ep->dispatching) {
            ucp_failover_seq_kick(seq_ep);
        }
    } else {
        ucs_debug("ep %p: sequenced message %u:%u not sent: %s",
                  seq_ep->seq->ep, seq_ep->stream->id, entry->sn,
                  ucs_status_string(status));
    }
}

/* Number a filled entry, retain it and send it (or leave it to the backlog);
 * its trailer is written once, here */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_submit(ucp_failover_seq_ep_t *seq_ep,
                        ucp_failover_seq_entry_t *entry, uint8_t am_id,
                        size_t length)
{
    ucp_failover_seq_t *seq       = seq_ep->seq;
    ucp_failover_seq_stream_t *st = seq_ep->stream;
    ucp_failover_seq_hdr_t hdr;
    ucs_status_t status;
    uint32_t ack;

    entry->sn     = st->tx_next++;
    entry->length = length + UCP_FAILOVER_SEQ_HDR_LEN;
    ucs_queue_push(&st->retained, &entry->queue);
    st->retained_bytes += entry->length;
    st->retained_max    = ucs_max(st->retained_max, st->retained_bytes);
    ++st->tx_msgs;

    hdr.ep_id  = ucp_ep_remote_id(seq->ep);
    hdr.sn     = entry->sn;
    hdr.am_id  = am_id;
    hdr.stream = st->id;
    if (ucs_unlikely(st->unsent != NULL)) {
        /* after the messages not sent yet, which the queued resume request
         * sends when the transport has room (and fills the rest then) */
        hdr.ack   = 0;
        hdr.flags = 0;
        memcpy(entry->data + length, &hdr, sizeof(hdr));
        if (!seq_ep->dispatching && !seq_ep->resume_queued) {
            ucp_failover_seq_kick(seq_ep);
        }
        return;
    }

    hdr.flags = ucp_failover_seq_ack_take(seq_ep, st, &ack);
    hdr.ack   = ack;
    memcpy(entry->data + length, &hdr, sizeof(hdr));

    ++seq_ep->busy;
    status = ucp_failover_seq_tl_post(seq_ep, entry);
    --seq_ep->busy;
    if (ucs_unlikely(UCS_STATUS_IS_ERR(status)) && !seq_ep->dead) {
        /* (dead: the endpoint failed in the send) */
        ucp_failover_seq_submit_unsent(seq_ep, entry, status);
    }
}

static UCS_F_ALWAYS_INLINE int ucp_failover_seq_passthrough(uint8_t id)
{
    /* failover's own control messages are not sequenced: they are about
     * lanes, and must pass while the sequence is held up. Neither are
     * wireup's: they connect the lanes, and the peer may need one (the
     * wireup ACK, which makes its RC lanes ready) before it can acknowledge
     * anything, so one held up behind a full window is a deadlock; a lost
     * one is handled by wireup, as without failover */
    return (id == UCP_AM_ID_FAILOVER) || (id == UCP_AM_ID_FAILOVER_SEQ) ||
           (id == UCP_AM_ID_WIREUP);
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
    seq_ep->max_short   = (attr->cap.flags & UCT_IFACE_FLAG_AM_SHORT) ?
                          (attr->cap.am.max_short +
                           UCP_FAILOVER_SEQ_HDR_LEN) :
                          0;
    seq_ep->max_bcopy   = attr->cap.am.max_bcopy + UCP_FAILOVER_SEQ_HDR_LEN;
    seq_ep->retain      = ep->worker->context->config.ext.multirail.retain;
    seq_ep->retain_half = seq_ep->retain / 2;
}

/*
 * The wrapper stops sending its stream (it is destroyed, or unwrapped while
 * busy). A data stream is orphaned then: what it did not see acknowledged
 * goes again, by the am lane's wrapper (its lane failed, or became the am
 * lane; a fragment that arrives twice is dropped as a duplicate).
 */
static void ucp_failover_seq_ep_detach(ucp_failover_seq_ep_t *seq_ep)
{
    ucp_failover_seq_stream_t *st = seq_ep->stream;

    if ((seq_ep->seq != NULL) && (seq_ep->seq->seq_ep == seq_ep)) {
        seq_ep->seq->seq_ep = NULL;
    }

    seq_ep->stream = NULL;
    if ((st == NULL) || (st->seq_ep != seq_ep)) {
        return;
    }

    st->seq_ep = NULL;
    if (st->id == 0) {
        return;
    }

    st->unsent     = ucp_failover_seq_first_retained(st);
    st->orphaned   = ucs_queue_length(&st->retained);
    st->tx_resent += st->orphaned;
}

UCS_CLASS_INIT_FUNC(ucp_failover_seq_ep_t, ucp_ep_h ep, uct_ep_h tl_ep,
                    ucp_failover_seq_t *seq, ucp_failover_seq_stream_t *st,
                    ucp_lane_index_t lane)
{
    UCS_CLASS_CALL_SUPER_INIT(ucp_proxy_ep_t, &ucp_failover_seq_ep_ops, ep,
                              tl_ep, 1);
    self->seq           = seq;
    self->stream        = st;
    self->resume.func   = ucp_failover_seq_resume_progress;
    self->resume_queued = 0;
    self->resume_ep     = NULL;
    self->window_full   = 0;
    self->dispatching   = 0;
    self->dispatch_id   = UCS_CALLBACKQ_ID_NULL;
    self->worker        = ep->worker;
    self->busy          = 0;
    self->dead          = 0;
    self->failing       = 0;
    ucp_failover_seq_ep_limits(self, ep, lane);
    ucs_queue_head_init(&self->pending);
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
static UCS_CLASS_DEFINE_NAMED_NEW_FUNC(ucp_failover_seq_ep_create,
                                       ucp_failover_seq_ep_t, uct_ep_t,
                                       ucp_ep_h, uct_ep_h,
                                       ucp_failover_seq_t*,
                                       ucp_failover_seq_stream_t*,
                                       ucp_lane_index_t);
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

/* Data lanes get a wrapper each (once the am lane has its own) */
static void ucp_failover_seq_wrap_data_lanes(ucp_ep_h ep, ucp_failover_seq_t *seq)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    ucp_failover_seq_stream_t *st;
    ucp_failover_seq_ep_t *seq_ep;
    ucp_lane_index_t lane;

    if (!(fo->flags & UCP_FAILOVER_EP_FLAG_STRIPE)) {
        return; /* the am_bw slots hold the am lane */
    }

    for (lane = 0; lane < ucp_ep_num_lanes(ep); ++lane) {
        if ((fo->failed_lanes & UCS_BIT(lane)) ||
            !ucp_failover_seq_is_data_lane(ep, lane) ||
            !ucp_failover_seq_wrappable(ep->uct_eps[lane])) {
            continue;
        }

        st = ucp_failover_seq_stream_get(seq, lane + 1);
        if ((st == NULL) || (st->seq_ep != NULL)) {
            continue;
        }

        seq_ep = ucp_failover_seq_wrap(ep, seq, st, lane, 0);
        if (seq_ep == NULL) {
            continue;
        }

        /* what the am lane's wrapper sent of it while it was orphaned may
         * be lost with the am lane later, which would not send it again:
         * everything not acknowledged goes again here (duplicates are
         * dropped) */
        st->unsent = ucp_failover_seq_first_retained(st);
        ucs_debug("ep %p: data lane[%d] sequenced as stream %u from message "
                  "%u", ep, lane, st->id, st->tx_next);
        /* its backlog of an earlier failure goes on this lane now */
        if (!ucs_queue_is_empty(&seq_ep->pending) || (st->unsent != NULL)) {
            ucp_failover_seq_kick(seq_ep);
        }
    }
}

void ucp_failover_seq_ep_connected(ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    ucp_failover_seq_ep_t *seq_ep;
    ucp_lane_index_t am_lane;
    ucp_failover_seq_t *seq;

    if (!(fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) ||
        ((ep->flags & (UCP_EP_FLAG_REMOTE_ID | UCP_EP_FLAG_FAILED |
                       UCP_EP_FLAG_CLOSED | UCP_EP_FLAG_REMOTE_CONNECTED)) !=
         (UCP_EP_FLAG_REMOTE_ID | UCP_EP_FLAG_REMOTE_CONNECTED)) ||
        (ep->cfg_index == UCP_WORKER_CFG_INDEX_NULL)) {
        return;
    }

    if ((fo->seq != NULL) && (fo->seq->seq_ep != NULL)) {
        ucp_failover_seq_wrap_data_lanes(ep, fo->seq);
        return;
    }

    am_lane = ucp_ep_get_am_lane(ep);
    if ((am_lane == UCP_NULL_LANE) || (fo->failed_lanes & UCS_BIT(am_lane)) ||
        !ucp_failover_seq_wrappable(ep->uct_eps[am_lane])) {
        return; /* not connected yet: a later call installs it */
    }

    seq = ucp_failover_seq_get(ep);
    if (seq == NULL) {
        return;
    }

    seq_ep = ucp_failover_seq_wrap(ep, seq, &seq->main, am_lane, 1);
    if (seq_ep == NULL) {
        return;
    }

    seq->seq_ep = seq_ep;
    ucs_debug("ep %p: am lane[%d] sequenced from message %u", ep, am_lane,
              seq->main.tx_next);
    if (!ucs_queue_is_empty(&seq_ep->pending)) {
        ucp_failover_seq_kick(seq_ep);
    }

    ucp_failover_seq_wrap_data_lanes(ep, seq);
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
    ucp_failover_seq_entry_t *entry;
    ucp_failover_seq_held_t *held, *tmp;

    ucs_queue_for_each_extract(entry, &st->retained, queue, 1) {
        entry->seq = NULL; /* not cached */
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
    ucp_failover_seq_entry_t *entry;
    uint8_t id;

    if (seq == NULL) {
        return;
    }

    for (id = 0; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        if ((seq->streams[id] != NULL) && (seq->streams[id]->seq_ep != NULL)) {
            /* its lanes were not destroyed (an error path): keep the state */
            ucs_warn("ep %p: sequencing endpoint %p outlives the endpoint", ep,
                     seq->streams[id]->seq_ep);
            return;
        }
    }

    for (id = 0; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        if (seq->streams[id] != NULL) {
            ucp_failover_seq_stream_cleanup(seq->streams[id]);
            if (id != 0) {
                ucs_free(seq->streams[id]);
            }
        }
    }

    ucs_queue_for_each_extract(entry, &seq->cache, queue, 1) {
        ucs_free(entry);
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
    seq->main.unsent     = ucp_failover_seq_first_retained(&seq->main);

    /* so do the data streams' acknowledgements, and the data streams
     * without a lane of their own sent what they hold on the old lane */
    for (id = 1; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        st = seq->streams[id];
        if (st == NULL) {
            continue;
        }

        st->ack_again = 1;
        if (ucp_failover_seq_orphan(st) && !ucs_queue_is_empty(&st->retained)) {
            st->unsent = ucp_failover_seq_first_retained(st);
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
 * Receiving
 */

static ucs_status_t ucp_failover_seq_send_ack(ucp_failover_seq_t *seq,
                                              ucp_failover_seq_stream_t *st)
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
    hdr.sn     = 0;
    hdr.ack    = ucp_failover_seq_rx_delivered(st);
    hdr.am_id  = 0;
    hdr.flags  = UCP_FAILOVER_SEQ_FLAG_ACK_ONLY;
    hdr.stream = st->id;
    status     = uct_ep_am_short(uct_ep, UCP_AM_ID_FAILOVER_SEQ, hdr.ep_id,
                                 UCS_PTR_BYTE_OFFSET(&hdr, sizeof(hdr.ep_id)),
                                 sizeof(hdr) - sizeof(hdr.ep_id));
    if (status == UCS_OK) {
        st->rx_ack_sent      = hdr.ack;
        st->rx_unacked_bytes = 0;
        st->ack_again        = 0;
        ++st->acks_sent;
    } else {
        ++st->acks_unsent;
        st->ack_status = status;
    }

    return status;
}

void ucp_failover_seq_round(ucp_ep_h ep)
{
    ucp_failover_seq_t *seq = ucp_failover_ep(ep)->seq;
    ucp_failover_seq_stream_t *st;
    uint8_t id;

    if (seq == NULL) {
        return;
    }

    /* acknowledgements not sent yet, and backlogs that wait for a lane */
    for (id = 0; id < UCP_FAILOVER_SEQ_STREAMS; ++id) {
        st = seq->streams[id];
        if (st == NULL) {
            continue;
        }

        if (ucp_failover_seq_ack_owed(st)) {
            ucp_failover_seq_send_ack(seq, st);
        }

        if ((st->seq_ep != NULL) && !st->seq_ep->dead &&
            (ucp_failover_seq_has_backlog(st->seq_ep) ||
             !ucs_queue_is_empty(&st->seq_ep->pending))) {
            ucp_failover_seq_kick(st->seq_ep);
        }
    }
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

static void ucp_failover_seq_hold(ucp_failover_seq_t *seq,
                                  ucp_failover_seq_stream_t *st,
                                  const ucp_failover_seq_hdr_t *hdr,
                                  const void *data, size_t length)
{
    ucp_failover_seq_held_t *held, *pos;

    ucs_list_for_each(pos, &st->held, list) {
        if (pos->sn == hdr->sn) {
            ++st->rx_dups; /* held already */
            return;
        }
    }

    held = ucs_malloc(sizeof(*held) + length, "failover_seq_held");
    if (held == NULL) {
        /* dropped: the sender sends it again only after a failover */
        ucs_error("ep %p: no memory to hold back message %u:%u", seq->ep,
                  st->id, hdr->sn);
        return;
    }

    held->sn     = hdr->sn;
    held->am_id  = hdr->am_id;
    held->flags  = hdr->flags;
    held->length = length;
    memcpy(held->data, data, length);
    ++st->rx_held;

    /* in order of numbers */
    ucs_list_for_each(pos, &st->held, list) {
        if ((int32_t)(pos->sn - held->sn) > 0) {
            ucs_list_insert_before(&pos->list, &held->list);
            return;
        }
    }

    ucs_list_add_tail(&st->held, &held->list);
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
        ++st->rx_msgs;
        st->rx_unacked_bytes += held->length;
        status = ucp_failover_seq_deliver(worker, seq->am_ids, held->am_id,
                                          held->data, held->length, 0);
        ucs_assert(status != UCS_INPROGRESS);
        ack_req |= !!(held->flags & UCP_FAILOVER_SEQ_FLAG_ACK_REQ);
        ucs_free(held);
    }

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
    ++st->rx_msgs;
    st->rx_unacked_bytes += length;
    status = ucp_failover_seq_deliver(worker, seq->am_ids, hdr->am_id, data,
                                      length, flags);
    if (ucs_unlikely(!ucs_list_is_empty(&st->held))) {
        ack_req |= ucp_failover_seq_deliver_held(seq, st);
    }

    *ack_owed_p = ack_req ||
                  ((ucp_failover_seq_rx_delivered(st) - st->rx_ack_sent) >=
                   UCP_FAILOVER_SEQ_ACK_MSGS) ||
                  (st->rx_unacked_bytes >= UCP_FAILOVER_SEQ_ACK_BYTES);
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
        ucp_failover_seq_release(st, hdr.ack);
        return UCS_OK;
    }

    /* a message of any stream acknowledges stream 0 */
    ucp_failover_seq_release(&seq->main, hdr.ack);

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
    if (st != NULL) {
        /* a batch, a request, or a duplicate (the sender's acks were lost) */
        ucp_failover_seq_send_ack(seq, st);
    }

    return status;
}

/*
 * A sequenced message. The usual one, the next message of stream 0 of a
 * known endpoint, is delivered here; anything else takes the slow path
 * (ucp_failover_seq_rx), which handles it in full.
 */
static ucs_status_t
ucp_failover_seq_handler(void *arg, void *data, size_t length, unsigned flags)
{
    ucp_worker_h worker = arg;
    ucp_failover_seq_hdr_t hdr;
    ucp_failover_seq_stream_t *st;
    ucp_failover_seq_t *seq;
    ucs_status_t status;
    ucp_ep_h ep;
    int ack_owed;

    if (ucs_unlikely(length < UCP_FAILOVER_SEQ_HDR_LEN)) {
        goto slow;
    }

    memcpy(&hdr, UCS_PTR_BYTE_OFFSET(data, length - UCP_FAILOVER_SEQ_HDR_LEN),
           sizeof(hdr));
    if (ucs_unlikely((hdr.stream != 0) ||
                     (hdr.flags & UCP_FAILOVER_SEQ_FLAG_ACK_ONLY) ||
                     (hdr.ep_id == UCS_PTR_MAP_KEY_INVALID)) ||
        ucs_unlikely(ucp_worker_get_ep_by_id(worker, hdr.ep_id, &ep) !=
                     UCS_OK)) {
        goto slow;
    }

    seq = ucp_failover_ep(ep)->seq;
    if (ucs_unlikely((seq == NULL) || (hdr.sn != seq->main.rx_next))) {
        goto slow;
    }

    st = &seq->main;
    ucp_failover_seq_release(st, hdr.ack);
    status = ucp_failover_seq_deliver_next(worker, seq, st, &hdr, data,
                                           length - UCP_FAILOVER_SEQ_HDR_LEN,
                                           flags, &ack_owed);
    if (ucs_unlikely(ack_owed)) {
        ucp_failover_seq_send_ack(seq, st);
    }

    return status;

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

/* ---------------------------------------------------------------------------
 * Interface limits, information
 */

void ucp_failover_iface_attr(ucp_worker_h worker, ucp_rsc_index_t rsc_index,
                             uct_iface_attr_t *attr)
{
    ucp_context_h context = worker->context;
    const size_t hdr_len  = UCP_FAILOVER_SEQ_HDR_LEN;
    ucp_md_index_t md_index;

    if (!ucp_failover_is_enabled(context)) {
        return;
    }

    /* A zero-copy send is copied into a retained entry and posted from
     * there with no memory handle (ucp_failover_seq_tl_post). A transport
     * whose memory domain needs one (RDMA) cannot take that: UCP sends its
     * large active messages as bcopy fragments instead, a copy as well */
    md_index = context->tl_rscs[rsc_index].md_index;
    if (context->tl_mds[md_index].attr.cap.flags & UCT_MD_FLAG_NEED_MEMH) {
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
}

uint32_t ucp_failover_seq_rx_expected(ucp_ep_h ep)
{
    return ucp_failover_seq_stream_rx_expected(ep, 0);
}

uint32_t ucp_failover_seq_stream_rx_expected(ucp_ep_h ep, uint8_t stream)
{
    ucp_failover_seq_t *seq = ucp_failover_ep(ep)->seq;

    return ((seq == NULL) || (stream >= UCP_FAILOVER_SEQ_STREAMS) ||
            (seq->streams[stream] == NULL)) ?
           0 : seq->streams[stream]->rx_next;
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

uint64_t ucp_failover_seq_stream_resent(ucp_ep_h ep, uint8_t id)
{
    ucp_failover_seq_t *seq = ucp_failover_ep(ep)->seq;

    if ((seq == NULL) || (id >= UCP_FAILOVER_SEQ_STREAMS) ||
        (seq->streams[id] == NULL)) {
        return 0;
    }

    return seq->streams[id]->tx_resent;
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
                              " ack(s) sent alone",
                              (seq->seq_ep != NULL) ? "on" : "off",
                              st->tx_msgs, st->tx_resent, st->retained_bytes,
                              st->retained_max, st->window_stalls, st->rx_msgs,
                              st->rx_dups, st->rx_held, st->acks_sent);

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
                                  PRIu64 " ack(s)", id,
                                  (st->seq_ep != NULL) ?
                                  "on its lane" : "via the am lane",
                                  st->tx_msgs, st->tx_resent,
                                  st->retained_bytes, st->retained_max,
                                  st->window_stalls, st->rx_msgs, st->rx_dups,
                                  st->rx_held, st->acks_sent);
    }
}
