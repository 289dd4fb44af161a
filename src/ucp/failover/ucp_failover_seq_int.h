/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * The sequencing module's own types and helpers, shared by its three files:
 * ucp_failover_seq_send.c (the sender: retention, sending, the sequencing
 * endpoint), ucp_failover_seq_recv.c (the receiver: delivery in order,
 * holding back, acknowledgements) and ucp_failover_seq.c (installing the
 * sequencing endpoints, the am lane moving, information). Imports go one
 * way: seq.c uses both sides, the receiver uses the sender.
 */

#ifndef UCP_FAILOVER_SEQ_INT_H_
#define UCP_FAILOVER_SEQ_INT_H_

#include "ucp_failover_int.h"

#include <ucp/core/ucp_proxy_ep.h>
#include <ucs/datastruct/queue.h>


/* A function built without GCC's SLP vectorisation, which packs pairs of
 * stores of a short path through vector registers: more instructions than
 * the stores (glibc builds its string functions with such an attribute) */
#if defined(__GNUC__) && !defined(__clang__)
#  define UCP_FAILOVER_SEQ_NO_SLP \
      __attribute__((optimize("no-tree-slp-vectorize")))
#else
#  define UCP_FAILOVER_SEQ_NO_SLP
#endif


/* Send an acknowledgement alone once the messages delivered since the last
 * one weigh this much, each its payload's bytes plus ACK_UNIT: after 32
 * messages at most, or 64 KiB */
#define UCP_FAILOVER_SEQ_ACK_BYTES (64 * UCS_KBYTE)
#define UCP_FAILOVER_SEQ_ACK_UNIT  (2 * UCS_KBYTE)

/* The bits of a stream's rx_debt above its weight, each for a state that the
 * receipt's fast path leaves to the slow path: messages held back (the
 * 'held' list is not empty), an acknowledgement the peer asked for before
 * the messages it covers came (ack_wanted). With any of them set the debt
 * never passes for a weight below ACK_BYTES, so the fast path checks the
 * debt alone (ucp_failover_seq_rx_slow_sync keeps them). The weight below
 * them is at most ACK_BYTES, so that an acknowledgement clears it with one
 * instruction (ucp_failover_seq_ack_sent: the mask is a sign-extended 32-bit
 * immediate on x86-64) */
#define UCP_FAILOVER_SEQ_RX_HELD   (1ul << 31)
#define UCP_FAILOVER_SEQ_RX_WANTED (1ul << 32)
#define UCP_FAILOVER_SEQ_RX_WEIGHT (UCP_FAILOVER_SEQ_RX_HELD - 1)

enum {
    UCP_FAILOVER_SEQ_FLAG_ACK_ONLY = UCS_BIT(0), /* no message, an ack */
    UCP_FAILOVER_SEQ_FLAG_ACK_REQ  = UCS_BIT(1), /* acknowledge at once */
    UCP_FAILOVER_SEQ_FLAG_RESEND   = UCS_BIT(2)  /* with ACK_ONLY: send the
                                                    stream again after the
                                                    ack (the receiver could
                                                    not hold one back) */
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


/*
 * Small retained messages are packed one after the other into chunks: a
 * buffer of the worker's pool (2 KiB, the 2176-byte bucket) that a stream
 * fills from its start. A chunk goes back to the pool when the last of its
 * messages is released, but for the stream's current one, which is filled
 * again from its start (while the worker's pool holds less than half its
 * bound; emptied by ucp_failover_seq_release_fast(), while messages do not
 * ask for acknowledgements, ack_req_due, which a chunk taken past the half
 * sets): a message then costs no buffer of its own, and a stream that sends
 * and is acknowledged in turn takes no buffer at all. A larger message has a
 * buffer of its own.
 */
#define UCP_FAILOVER_SEQ_CHUNK_SIZE      2048
#define UCP_FAILOVER_SEQ_CHUNK_ENTRY_MAX 512  /* an entry, header and trailer
                                                 included, up to this size
                                                 goes into a chunk */
#define UCP_FAILOVER_SEQ_FAST_ENTRY_MAX  104  /* the largest entry of the
                                                 fast short send: 56 + 8 +
                                                 16 + 19, aligned to 8 */

typedef struct ucp_failover_seq_chunk {
    ucp_failover_seq_t               *seq;  /* NULL: the endpoint is gone */
    struct ucp_failover_seq_stream   *st;   /* the stream whose retention
                                               counts it, or NULL (gone) */
    uint32_t                         used;  /* bytes of data[] given out */
    uint32_t                         size;  /* bytes of data[] */
    uint32_t                         live;  /* entries in it not freed */
    uint32_t                         held;  /* bytes of its buffer */
    uint32_t                         current; /* its stream fills it */
    uint32_t                         fast_end; /* the fast short send takes
                                                  a place while 'used' is
                                                  at most this (room for
                                                  its largest entry) */
    uint8_t                          data[];
} ucp_failover_seq_chunk_t;


/* A retained message */
typedef struct ucp_failover_seq_entry {
    ucs_queue_elem_t         queue;
    uct_completion_t         comp;  /* zero-copy sends of it in flight
                                       (func and status set by the first) */
    ucp_failover_seq_t       *seq;  /* NULL: released while a zero-copy
                                       send reads it, or the endpoint is
                                       gone (its completion frees it) */
    ucp_failover_seq_chunk_t *chunk; /* the chunk that holds it, or NULL:
                                        a buffer of its own */
    uint32_t                 sn;
    uint32_t                 length; /* bytes in data[], trailer included
                                        (by reference: the header and the
                                        trailer) */
    uint32_t                 held;   /* bytes of its own buffer, which the
                                        retention counts (0 in a chunk: the
                                        chunk's bytes are counted) */
    uint32_t                 flags;  /* UCP_FAILOVER_SEQ_ENTRY_*, of an
                                        entry with a buffer of its own only
                                        (not set in a chunk) */
    uint8_t                  data[];
} ucp_failover_seq_entry_t;


enum {
    /* The message is sent by reference (ucp_failover_seq_send_ref): data[]
     * holds its header and trailer, and a ucp_failover_seq_ref_t after them
     * (ucp_failover_seq_entry_ref) the user's iov and completion */
    UCP_FAILOVER_SEQ_ENTRY_REF       = UCS_BIT(0),
    /* ... and it was said (once) that it waits for a copy */
    UCP_FAILOVER_SEQ_ENTRY_WAIT_SAID = UCS_BIT(1)
};


/*
 * A zero-copy message sent by reference (of UCX_MULTIRAIL_REF_THRESH bytes
 * or more; smaller ones are copied): the user's data stays where it is and
 * is sent from there, and the user's request completes when the peer has
 * acknowledged the message and no transport reads the data any more (or the
 * message was copied to be sent again on another lane, or the endpoint is
 * gone: then with UCS_ERR_CANCELED).
 */
#define UCP_FAILOVER_SEQ_REF_IOV 8 /* iov elements, the trailer's
                                      included */

typedef struct {
    uct_completion_t *user_comp; /* NULL: UCP was told the message is sent */
    ucs_status_t     status;     /* what user_comp gets */
    uint32_t         iovcnt;     /* the user's iov elements */
    unsigned         send_flags; /* UCP's flags of the send */
    uint32_t         md;         /* memory domain of the memory handles in
                                    iov[] (UCP_NULL_RESOURCE: none) */
    uct_iov_t        iov[];      /* the user's, then the trailer's */
} ucp_failover_seq_ref_t;


/* The record of an entry sent by reference, after its header and trailer */
static UCS_F_ALWAYS_INLINE ucp_failover_seq_ref_t *
ucp_failover_seq_entry_ref(ucp_failover_seq_entry_t *entry)
{
    return (ucp_failover_seq_ref_t*)UCS_PTR_BYTE_OFFSET(
            entry->data, ucs_align_up_pow2(entry->length, 8));
}


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
    ucp_failover_seq_chunk_t     *chunk;       /* filled by new messages, or
                                                  NULL */
    size_t                       retained_bytes; /* the buffers of
                                                  'retained' and its chunks */
    uint32_t                     tx_acked;     /* highest ack received */
    uint32_t                     ack_asked_sn; /* ... up to this one */
    int                          ack_asked;    /* a message asked for an
                                                  ack (ACK_REQ) that has not
                                                  come yet */
    size_t                       retained_max; /* high-water mark, bytes */
    uint64_t                     tx_resent;
    uint32_t                     window_stalls;
    uint32_t                     refs;         /* retained messages sent by
                                                  reference */
    uint64_t                     tx_refs;      /* messages sent by
                                                  reference */
    uint64_t                     tx_ref_copies; /* of them, copied to be
                                                   sent again */
    unsigned                     orphaned;     /* fragments to send again
                                                  since its lane went, not
                                                  logged yet */
    /* receive side */
    uint32_t                     rx_next;      /* number expected next */
    uint32_t                     rx_ack_sent;  /* last acknowledged */
    int                          ack_again;    /* the am lane moved: the last
                                                  acknowledgement may be
                                                  lost */
    int                          resend_owed;  /* a RESEND to send (an early
                                                  message was not held) */
    int                          ack_wanted;   /* the peer asked for an
                                                  acknowledgement once this
                                                  side delivers up to
                                                  rx_ack_wanted */
    uint32_t                     rx_ack_wanted;
    size_t                       rx_debt;      /* the weight of the
                                                  messages delivered since
                                                  rx_ack_sent (at most
                                                  ACK_BYTES), and the bits
                                                  above it (RX_HELD,
                                                  RX_WANTED) */
    ucs_list_link_t              held;         /* arrived early, by number */
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
    /* waits for the worker's bound (ucp_failover_seq_worker_full) */
    ucp_failover_pool_waiter_t pool_waiter;
    int                dispatching;   /* running requests of 'pending' */
    int                mem_wait;      /* what stopped the last send was
                                         memory for a copy, not the
                                         transport */
    uct_worker_cb_id_t dispatch_id;
    ucp_worker_h       worker;
    unsigned           busy;          /* depth of its own code on the stack */
    int                dead;          /* unwrapped while busy: freed later */
    int                failing;       /* the transport failed in our own
                                         call: its failover runs from
                                         progress */
    /* the transport's limits, trailer included, and the retention bound */
    size_t             max_short;
    /* the fast short send takes payloads of 8 to 8 + short_span - 1 bytes:
     * short_span_max, or 0 (closed) while anything it does not check may
     * hold (ucp_failover_seq_ep_gate_close) */
    uint32_t           short_span;
    uint32_t           short_span_max; /* ucp_failover_seq_ep_short_span */
    size_t             max_bcopy;
    size_t             retain;
    size_t             ref_thresh;    /* UCX_MULTIRAIL_REF_THRESH */
    size_t             ref_iov;       /* a zero-copy message of fewer iov
                                         elements is sent by reference; 0:
                                         never (the transport has no zero
                                         copy, or needs memory handles and
                                         there are no registered buffers) */
    ucp_md_index_t     ref_md;        /* the transport's memory domain if
                                         it needs memory handles, else
                                         UCP_NULL_RESOURCE */
} ucp_failover_seq_ep_t;


/* Per-endpoint sequencing state */
struct ucp_failover_seq {
    ucp_ep_h                  ep;
    ucp_failover_seq_ep_t     *seq_ep;     /* on the am lane, or NULL */
    ucp_failover_seq_stream_t main;        /* stream 0 */
    /* by id: &main, then the data streams used so far */
    ucp_failover_seq_stream_t *streams[UCP_FAILOVER_SEQ_STREAMS];
    ucp_failover_pool_t       *pool;       /* the worker's buffers, or
                                              NULL: malloc'ed */
    size_t                    retain;      /* UCX_MULTIRAIL_RETAIN */
    size_t                    retained_bytes; /* of all streams: the bound
                                                 of the retention */
    int                       ack_req_due; /* messages ask for an
                                              acknowledgement: the retention
                                              is past half its bound, or the
                                              worker's pool half full, as of
                                              its last change */
    uint64_t                  remote_id;   /* the peer endpoint's id (known
                                              before any lane is wrapped) */
    int                       window_full; /* a wrapper waits for room */
    uint64_t                  am_ids;      /* ids a message may carry: a
                                              handler of the context's
                                              features, not failover's */
    const uct_am_callback_t   *am_cb;      /* by id: the handler of an id
                                              of am_ids, else NULL (a
                                              shared table,
                                              ucp_failover_seq_am_cb) */
    /* entries sent by reference that left the retention, whose users'
     * requests complete from progress (ucp_failover_seq_ref_leave) */
    ucs_queue_head_t          refs_done;
    uct_worker_cb_id_t        refs_done_id;
};


/* ---------------------------------------------------------------------------
 * Helpers
 */

static UCS_F_ALWAYS_INLINE uint32_t
ucp_failover_seq_rx_delivered(const ucp_failover_seq_stream_t *st)
{
    return st->rx_next - 1;
}

/* Messages numbered in @a st so far (modulo 2^32, as the numbers): the
 * send path keeps no count of its own */
static UCS_F_ALWAYS_INLINE uint64_t
ucp_failover_seq_tx_msgs(const ucp_failover_seq_stream_t *st)
{
    return (uint32_t)(st->tx_next - 1);
}

/* Messages of the peer's stream @a st delivered so far (modulo 2^32) */
static UCS_F_ALWAYS_INLINE uint64_t
ucp_failover_seq_rx_msgs(const ucp_failover_seq_stream_t *st)
{
    return (uint32_t)(st->rx_next - 1);
}

static UCS_F_ALWAYS_INLINE int
ucp_failover_seq_ack_owed(const ucp_failover_seq_stream_t *st)
{
    return (st->rx_ack_sent != ucp_failover_seq_rx_delivered(st)) ||
           st->ack_again;
}

/* This side acknowledged the peer's messages of @a st up to @a ack (on the
 * am lane: nothing is owed again) */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_ack_sent(ucp_failover_seq_stream_t *st, uint32_t ack)
{
    UCS_STATIC_ASSERT(UCP_FAILOVER_SEQ_ACK_BYTES <= UCP_FAILOVER_SEQ_RX_WEIGHT);
    UCS_STATIC_ASSERT(UCP_FAILOVER_SEQ_ACK_BYTES / UCP_FAILOVER_SEQ_ACK_UNIT ==
                      32);
    st->rx_ack_sent = ack;
    st->rx_debt    &= ~UCP_FAILOVER_SEQ_RX_WEIGHT;
    st->ack_again   = 0;
}

/* A message of @a length bytes delivered in @a st (not by the receipt's fast
 * path, which adds its weight as long as the sum stays below ACK_BYTES) */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_rx_weigh(ucp_failover_seq_stream_t *st, size_t length)
{
    size_t weight = (st->rx_debt & UCP_FAILOVER_SEQ_RX_WEIGHT) + length +
                    UCP_FAILOVER_SEQ_ACK_UNIT;

    st->rx_debt = (st->rx_debt & ~UCP_FAILOVER_SEQ_RX_WEIGHT) |
                  ucs_min(weight, UCP_FAILOVER_SEQ_ACK_BYTES);
}

/* Whether the messages delivered since the last acknowledgement weigh
 * enough for one alone */
static UCS_F_ALWAYS_INLINE int
ucp_failover_seq_ack_batch_full(const ucp_failover_seq_stream_t *st)
{
    return (st->rx_debt & UCP_FAILOVER_SEQ_RX_WEIGHT) >=
           UCP_FAILOVER_SEQ_ACK_BYTES;
}

/* The held messages of @a st or its ack_wanted changed: the bits of its debt
 * say whether it has any, and whether it is set */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_rx_slow_sync(ucp_failover_seq_stream_t *st)
{
    st->rx_debt = (st->rx_debt & UCP_FAILOVER_SEQ_RX_WEIGHT) |
                  (ucs_list_is_empty(&st->held) ? 0 : UCP_FAILOVER_SEQ_RX_HELD) |
                  (st->ack_wanted ? UCP_FAILOVER_SEQ_RX_WANTED : 0);
}

/* Stream @a id of endpoint @a ep's sequencing state, or NULL if it has none
 * (diagnostics and tests) */
static UCS_F_ALWAYS_INLINE ucp_failover_seq_stream_t *
ucp_failover_seq_stream_find(ucp_ep_h ep, uint8_t id)
{
    ucp_failover_seq_t *seq = ucp_failover_ep(ep)->seq;

    return ((seq == NULL) || (id >= UCP_FAILOVER_SEQ_STREAMS)) ?
           NULL : seq->streams[id];
}

/* The first retained message of @a st (to send again), or NULL */
static UCS_F_ALWAYS_INLINE struct ucp_failover_seq_entry *
ucp_failover_seq_first_retained(ucp_failover_seq_stream_t *st)
{
    return ucs_queue_is_empty(&st->retained) ? NULL :
           ucs_queue_head_elem_non_empty(&st->retained,
                                         struct ucp_failover_seq_entry, queue);
}

static UCS_F_ALWAYS_INLINE uct_ep_h
ucp_failover_seq_tl_ep(ucp_failover_seq_ep_t *seq_ep)
{
    return seq_ep->super.uct_ep;
}

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

/* Whether @a st is a data stream whose lane is gone: the am lane's wrapper
 * sends its backlog */
static UCS_F_ALWAYS_INLINE int
ucp_failover_seq_orphan(const ucp_failover_seq_stream_t *st)
{
    return (st != NULL) && (st->id != 0) && (st->seq_ep == NULL);
}


/* ---------------------------------------------------------------------------
 * The sender (ucp_failover_seq_send.c)
 */

/** Stream @a id of the endpoint's state, created on first use (NULL: no
 *  memory) */
ucp_failover_seq_stream_t *
ucp_failover_seq_stream_get(ucp_failover_seq_t *seq, uint8_t id);


/** The active message ids a sequenced message may be delivered to */
uint64_t ucp_failover_seq_am_ids(ucp_context_h context);


/** Whether the wrapper has messages retained but not sent yet */
int ucp_failover_seq_has_backlog(ucp_failover_seq_ep_t *seq_ep);


/** Whether a live wrapper has work waiting: a backlog, or requests in its
 *  queue (what kicks and the probe rounds move along) */
static UCS_F_ALWAYS_INLINE int
ucp_failover_seq_ep_waiting(ucp_failover_seq_ep_t *seq_ep)
{
    return (seq_ep != NULL) && !seq_ep->dead &&
           (ucp_failover_seq_has_backlog(seq_ep) ||
            !ucs_queue_is_empty(&seq_ep->pending));
}


/** Send the wrapper's backlog and run its waiting requests */
void ucp_failover_seq_kick(ucp_failover_seq_ep_t *seq_ep);


/** The same from the worker's progress */
void ucp_failover_seq_dispatch_schedule(ucp_failover_seq_ep_t *seq_ep);


/** Free a dead wrapper, from progress if it is in one of its own calls */
void ucp_failover_seq_ep_free_dead(ucp_failover_seq_ep_t *seq_ep);


/** The limits of the transport endpoint of @a lane, as the wrapper sends */
void ucp_failover_seq_ep_short_span(ucp_failover_seq_ep_t *seq_ep);

void ucp_failover_seq_ep_limits(ucp_failover_seq_ep_t *seq_ep, ucp_ep_h ep,
                                ucp_lane_index_t lane);


/** The wrapper stops sending its stream (destroyed, or unwrapped while
 *  busy) */
void ucp_failover_seq_ep_detach(ucp_failover_seq_ep_t *seq_ep);


/** What a purge of a transport endpoint's pending queue that a wrapper
 *  (@a seq_ep) sends through takes to @a cb, but the wrappers' own resume
 *  requests (ucp_failover_seq_purge_filter) */
typedef struct {
    ucp_failover_seq_ep_t        *seq_ep;
    uct_pending_purge_callback_t cb;
    void                         *arg;
} ucp_failover_seq_purge_arg_t;


void ucp_failover_seq_purge_filter(uct_pending_req_t *req, void *arg);


/** Create a wrapper of @a tl_ep, the transport endpoint of @a lane, to send
 *  stream @a st */
ucs_status_t ucp_failover_seq_ep_create(ucp_ep_h ep, uct_ep_h tl_ep,
                                        ucp_failover_seq_t *seq,
                                        ucp_failover_seq_stream_t *st,
                                        ucp_lane_index_t lane,
                                        uct_ep_t **ep_p);


/** Give a chunk with no entries back to the worker's pool */
void ucp_failover_seq_chunk_release(ucp_failover_seq_chunk_t *chunk);


/** A chunk with an entry that a zero-copy send still reads after its
 *  release leaves its stream (not counted any more, not filled): its last
 *  entry frees it, whether or not the endpoint is still there */
void ucp_failover_seq_chunk_detach(ucp_failover_seq_chunk_t *chunk);


/** Send a message without data on the am lane: an acknowledgement alone of
 *  what this side received in stream @a st (ACK_ONLY), with @a flags and
 *  @a sn (0, or with ACK_REQ the number to acknowledge) */
ucs_status_t ucp_failover_seq_send_ack_flags(ucp_failover_seq_t *seq,
                                             ucp_failover_seq_stream_t *st,
                                             uint8_t flags, uint32_t sn);


/** The users' requests of messages sent by reference that wait to complete
 *  from progress complete now (the endpoint goes) */
void ucp_failover_seq_refs_flush(ucp_failover_seq_t *seq);


/** Ask the peer to acknowledge stream @a st at once */
void ucp_failover_seq_ask_ack(ucp_failover_seq_t *seq,
                              ucp_failover_seq_stream_t *st);


/** Wrappers that wait for room in the retention move on if there is some */
void ucp_failover_seq_window_check(ucp_failover_seq_t *seq);


/*
 * The gate of the fast short send (ucp_failover_seq_ep_am_short): it checks
 * only the length and the room in the stream's current chunk, so it is
 * closed (short_span 0) whenever anything else may call for the general
 * path: requests wait in the wrapper, its stream has messages not handed to
 * the transport, its messages are to ask for an acknowledgement, or it has
 * no stream. Whatever makes one of these true closes it; the general path
 * opens it again when none holds (ucp_failover_seq_ep_gate_open).
 */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_ep_gate_close(ucp_failover_seq_ep_t *seq_ep)
{
    seq_ep->short_span = 0;
}

/** Close the gates of every wrapper of @a seq */
void ucp_failover_seq_gates_close(ucp_failover_seq_t *seq);

/* Set the first message of @a st not handed to the transport */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_unsent_set(ucp_failover_seq_stream_t *st,
                            struct ucp_failover_seq_entry *entry)
{
    st->unsent = entry;
    if ((entry != NULL) && (st->seq_ep != NULL)) {
        ucp_failover_seq_ep_gate_close(st->seq_ep);
    }
}


/* The bytes @a seq retains changed: whether its messages ask for an
 * acknowledgement (what a message checks, instead of the bounds) */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_held_changed(ucp_failover_seq_t *seq)
{
    int due = (seq->retained_bytes >= (seq->retain / 2)) ||
              ucp_failover_pool_half_full(seq->pool);

    if (ucs_unlikely(due && !seq->ack_req_due)) {
        ucp_failover_seq_gates_close(seq);
    }
    seq->ack_req_due = due;
}


/** Free an entry sent by reference, and complete its user's request */
void ucp_failover_seq_ref_free(ucp_failover_seq_entry_t *entry);


/* Free a retained entry: its place in a chunk (the chunk goes back to the
 * pool with its last entry, unless its stream fills it), or its buffer */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_entry_free(ucp_failover_seq_entry_t *entry)
{
    ucp_failover_seq_chunk_t *chunk = entry->chunk;

    if (ucs_likely(chunk != NULL)) {
        if (--chunk->live == 0) {
            if (ucs_likely(chunk->current &&
                           !ucp_failover_pool_half_full(chunk->seq->pool))) {
                chunk->used = 0;
            } else {
                ucp_failover_seq_chunk_release(chunk);
            }
        }
        return;
    }

    if (ucs_unlikely(entry->flags & UCP_FAILOVER_SEQ_ENTRY_REF)) {
        ucp_failover_seq_ref_free(entry);
        return;
    }

    ucp_failover_pool_put(entry, entry->held);
}


/** Release the messages of @a st up to @a ack, newer than tx_acked (any
 *  number of them, of any kind: the general case of
 *  ucp_failover_seq_release()) */
void ucp_failover_seq_release_upto(ucp_failover_seq_t *seq,
                                   ucp_failover_seq_stream_t *st,
                                   uint32_t ack);


/*
 * The peer delivered our messages of @a st up to @a ack, and this is every
 * message sent so far: release them at once if they are all in the
 * stream's current chunk (which holds no other live entry: a chunk entry
 * sent with zero copy retires its chunk first), by emptying the retention
 * and the chunk. Returns 0 if that is not the case (or a wrapper waits for
 * room, or messages ask for an acknowledgement: the retention past half its
 * bound or the worker's pool half full as of the retention's last change,
 * when the emptied chunk may have to go back to the pool): the general
 * ucp_failover_seq_release_upto() then releases.
 * An acknowledgement not newer than the last one releases nothing: what it
 * covers was released then (the peer never acknowledges past tx_next - 1),
 * and the window stays as it is (window_full implies retained_bytes >=
 * retain, which only a release lowers).
 *
 * This is the release of a ping-pong and of a sender the peer has caught up
 * with: a few loads and compares and seven stores, whatever the number of
 * messages, and no call (nothing of the receiver's fast path lives across
 * a call).
 */
static UCS_F_ALWAYS_INLINE int
ucp_failover_seq_release_fast(ucp_failover_seq_t *seq,
                              ucp_failover_seq_stream_t *st, uint32_t ack)
{
    ucp_failover_seq_chunk_t *chunk = st->chunk;

    if ((int32_t)(ack - st->tx_acked) <= 0) {
        return 1;
    }

    if (ucs_likely((chunk != NULL) && (chunk->live == (ack - st->tx_acked)) &&
                   ((ack + 1) == st->tx_next) &&
                   !(seq->window_full | seq->ack_req_due))) {
        st->tx_acked  = ack;
        st->ack_asked = 0;
        st->unsent    = NULL;
        ucs_queue_head_init(&st->retained);
        chunk->live = 0;
        chunk->used = 0;
        return 1;
    }

    return 0;
}


/* The peer delivered our messages of @a st up to @a ack: release them */
static UCS_F_ALWAYS_INLINE void
ucp_failover_seq_release(ucp_failover_seq_t *seq,
                         ucp_failover_seq_stream_t *st, uint32_t ack)
{
    if (!ucp_failover_seq_release_fast(seq, st, ack)) {
        ucp_failover_seq_release_upto(seq, st, ack);
    }
}


/* ---------------------------------------------------------------------------
 * The receiver (ucp_failover_seq_recv.c)
 */

/** Send an acknowledgement of stream @a st alone */
ucs_status_t ucp_failover_seq_send_ack(ucp_failover_seq_t *seq,
                                       ucp_failover_seq_stream_t *st);

#endif
