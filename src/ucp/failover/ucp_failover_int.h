/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * Internal interfaces between the parts of the failover module.
 */

#ifndef UCP_FAILOVER_INT_H_
#define UCP_FAILOVER_INT_H_

#include "ucp_failover.h"
#include "ucp_failover_pool.h"

#include <ucp/core/ucp_ep.inl>
#include <ucs/async/async_fwd.h>
#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/queue_types.h>
#include <ucs/time/time_def.h>
#include <uct/api/uct.h>

#include <net/if.h>


typedef struct ucp_failover_seq ucp_failover_seq_t;


/** The endpoint's failover state */
static UCS_F_ALWAYS_INLINE ucp_failover_ep_t *ucp_failover_ep(ucp_ep_h ep)
{
    return ucp_ep_ext_control(ep)->failover;
}


/** Whether @a lane may fail over (else its failure fails the endpoint) */
int ucp_failover_lane_can_fail(ucp_ep_h ep, ucp_lane_index_t lane);


/**
 * Fail over @a lane: mark it FAILED, switch the endpoint to a configuration
 * without it, discard its UCT endpoint and replay its pending requests;
 * optionally tell the peer. If the worker has no configuration left for the
 * endpoint without the lane, the endpoint's failure is scheduled (as without
 * failover; @a status, or UCS_ERR_ENDPOINT_TIMEOUT) and the error returned.
 */
ucs_status_t ucp_failover_lane_down(ucp_ep_h ep, ucp_lane_index_t lane,
                                    const char *reason, ucs_status_t status,
                                    int notify_peer);


/** Send purged pending requests again under the current configuration */
void ucp_failover_replay(ucp_ep_h ep, ucs_queue_head_t *replay_q);


/** Make a purged pending request follow the endpoint's new configuration;
 *  returns 0 if it is not to be queued again (its completion sends it
 *  again) */
int ucp_failover_reroute(ucp_request_t *req);


/** Take the roles of the @a failed lanes out of a configuration key of
 *  @a worker (the rma role to a lane left that puts and gets, if no rma
 *  lane is left) */
void ucp_failover_key_remove_lanes(ucp_worker_h worker,
                                   ucp_ep_config_key_t *key,
                                   ucp_lane_map_t failed,
                                   struct ucs_string_buffer *strb);


/** A lane that can take over the am lane, ignoring @a failing; or
 *  UCP_NULL_LANE */
ucp_lane_index_t ucp_failover_am_survivor(ucp_ep_h ep, ucp_lane_map_t failing);


/** Set the am lane of @a key to @a am_lane (am_bw slots follow it) */
void ucp_failover_key_set_am_lane(ucp_ep_config_key_t *key,
                                  ucp_lane_index_t am_lane,
                                  struct ucs_string_buffer *strb);


/** Create the sequencing state of the endpoint (NULL: no memory) */
ucp_failover_seq_t *ucp_failover_seq_create(ucp_ep_h ep);


/** Sequencing state of the endpoint, created on first use (NULL: no memory) */
static UCS_F_ALWAYS_INLINE ucp_failover_seq_t *
ucp_failover_seq_get(ucp_ep_h ep)
{
    ucp_failover_seq_t *seq = ucp_failover_ep(ep)->seq;

    return (seq != NULL) ? seq : ucp_failover_seq_create(ep);
}


/** Release the sequencing state (endpoint destruction) */
void ucp_failover_seq_cleanup(ucp_ep_h ep);


/** Whether @a uct_ep is a sequencing endpoint */
int ucp_failover_seq_ep_test(uct_ep_h uct_ep);


/** Whether the endpoint sequences its am lane (so the am lane may fail) */
int ucp_failover_seq_active(ucp_ep_h ep);


/**
 * The endpoint's configuration has a new am lane: the sequencing endpoint
 * moves from @a old_lane to it, the requests pending on the old lane go to
 * @a replay_q, and every message not acknowledged is sent again first (call
 * ucp_failover_seq_resend() once the caller is done). Returns the old lane's
 * transport endpoint, for the caller to discard.
 */
uct_ep_h ucp_failover_seq_am_lane_moved(ucp_ep_h ep, ucp_lane_index_t old_lane,
                                        ucs_queue_head_t *replay_q);


/**
 * A transport error on the am lane inside the sequencing endpoint's own
 * send: fail the lane over from progress instead. Returns 1 if deferred.
 */
int ucp_failover_seq_defer_error(ucp_ep_h ep, ucp_lane_index_t lane,
                                 ucs_status_t status);


/** Send what the sequencing endpoint holds back (after a lane change) */
void ucp_failover_seq_resend(ucp_ep_h ep);


/** Install sequencing on the endpoint's lanes, as far as they are connected;
 *  whether something is left to install later (wireup goes on) */
int ucp_failover_seq_install(ucp_ep_h ep);


/** In each probe round that tends the endpoint: send owed acknowledgements
 *  and move backlogs along; whether any is still owed */
int ucp_failover_seq_round(ucp_ep_h ep);


/** Tests: the number of the next message the endpoint delivers (0: none
 *  received), of stream 0 or of data stream @a stream, the trailer's length,
 *  and a trailer as a peer packs it */
uint32_t ucp_failover_seq_rx_expected(ucp_ep_h ep);
uint32_t ucp_failover_seq_stream_rx_expected(ucp_ep_h ep, uint8_t stream);
size_t ucp_failover_seq_hdr_len(void);
void ucp_failover_seq_pack_hdr(void *dest, uint64_t ep_id, uint32_t sn,
                               uint8_t am_id, uint8_t stream);


/** Tests: an acknowledgement alone of stream @a stream up to @a ack, as a
 *  peer packs it (the whole message: a trailer) */
void ucp_failover_seq_pack_ack(void *dest, uint64_t ep_id, uint32_t ack,
                               uint8_t stream);


/** Tests: of the endpoint's stream @a stream, the number of the next message
 *  it sends, the last one acknowledged, and how many it retains (0 for a
 *  stream it does not have) */
void ucp_failover_seq_tx_state(ucp_ep_h ep, uint8_t stream, uint32_t *next_p,
                               uint32_t *acked_p, size_t *retained_p);


/** Tests: the acknowledgements alone the endpoint sent of what it received
 *  in stream @a stream (0 for a stream it does not have) */
uint64_t ucp_failover_seq_acks_sent(ucp_ep_h ep, uint8_t stream);


/** Tests: lower the transport limits the wrapper of the endpoint's am lane
 *  sends with (trailer included): longer messages go by bcopy, zero copy */
void ucp_failover_seq_limit(ucp_ep_h ep, size_t max_short, size_t max_bcopy);


/** Sequencing counters of the endpoint, for ucp_ep_print_info() */
void ucp_failover_seq_info(ucp_ep_h ep, struct ucs_string_buffer *strb);


/** Failover messages (active message id UCP_AM_ID_FAILOVER) */
enum {
    UCP_FAILOVER_MSG_LANE_DOWN   = 1, /* the lane failed */
    UCP_FAILOVER_MSG_LANE_UP_REQ = 2, /* recovery: sent over the new lane */
    UCP_FAILOVER_MSG_LANE_UP_ACK = 3, /* recovery: answer, over the new lane */
    UCP_FAILOVER_MSG_LANE_UP     = 4, /* recovery: the sender uses the lane */
    UCP_FAILOVER_MSG_CONNECT     = 5, /* recovery: the sender's new endpoint
                                         address (point-to-point lanes) */
    UCP_FAILOVER_MSG_CONNECT_ACK = 6, /* recovery: the answer's address */
    UCP_FAILOVER_MSG_CLOSING     = 7  /* the sender closes the endpoint */
};


/* The longest transport endpoint address a failover message carries */
#define UCP_FAILOVER_MSG_ADDR_MAX 255


/*
 * A failover message, after an 8-byte header: the receiver's endpoint id when
 * the sender knows it, else UCS_PTR_MAP_KEY_INVALID and the receiver finds its
 * endpoint by the sender's worker UUID and the pair's connection number
 * (worker-address endpoints learn the peer's id only later).
 */
typedef struct {
    uint8_t          type;          /* UCP_FAILOVER_MSG_* */
    ucp_lane_index_t sender_lane;   /* the lane, in the sender's numbering */
    ucp_lane_index_t receiver_lane; /* in the receiver's, or UCP_NULL_LANE */
    ucp_lane_index_t num_lanes;     /* the sender's number of lanes */
    uint16_t         tl_name_csum;  /* checksum of the lane's transport name */
    uint16_t         conn_sn;       /* the endpoint pair's connection number */
    uint64_t         sender_uuid;   /* the sender worker's UUID */
    uint32_t         token;         /* recovery messages: the attempt */
    uint16_t         lane_sn;       /* messages on the am lane: their order
                                       per lane and sender, from 1; 0 for
                                       CLOSING. LANE_UP_REQ and LANE_UP_ACK
                                       (over the rail: an attempt's endpoint
                                       or the lane): the last one the
                                       sender numbered for the lane, 0 if
                                       none */
    uint8_t          addr_len;      /* length of the address that follows */
} UCS_S_PACKED ucp_failover_msg_t;


/** Fill a failover message about @a lane */
void ucp_failover_msg_init(ucp_ep_h ep, ucp_lane_index_t lane, uint8_t type,
                           uint32_t token, ucp_failover_msg_t *msg);


/** The header of a failover message to the peer of @a ep */
uint64_t ucp_failover_msg_header(ucp_ep_h ep);


/**
 * Send @a msg (with its address) at once on @a uct_ep, the transport
 * endpoint of @a lane or of an attempt to re-establish it: short when it
 * fits the transport's short limit, else bcopy.
 */
ucs_status_t ucp_failover_msg_send(ucp_ep_h ep, ucp_lane_index_t lane,
                                   uct_ep_h uct_ep,
                                   const ucp_failover_msg_t *msg);


/**
 * Send a failover message about @a lane on the am lane (ordered, queued),
 * followed by @a addr_len bytes of @a addr.
 */
void ucp_failover_wire_send(ucp_ep_h ep, ucp_lane_index_t lane, uint8_t type,
                            uint32_t token, const void *addr,
                            size_t addr_len);


/** Tell the peer that @a lane failed (a LANE_DOWN message) */
void ucp_failover_wire_lane_down(ucp_ep_h ep, ucp_lane_index_t lane);


/**
 * The peer's messages about @a lane numbered up to @a lane_sn are superseded
 * (it answered our re-probe, or re-probes a lane that is up here, after
 * sending them): from now on they are ignored as stale. 0 means none.
 */
void ucp_failover_wire_superseded(ucp_ep_h ep, ucp_lane_index_t lane,
                                  uint16_t lane_sn);


/**
 * After the am lane moved: tell the peer again that each of @a lanes failed,
 * except those being recovered (a LANE_DOWN sent before may have been lost
 * with the old am lane).
 */
void ucp_failover_wire_lane_down_again(ucp_ep_h ep, ucp_lane_map_t lanes);


enum {
    UCP_FAILOVER_ATTEMPT_SEND_REQ = UCS_BIT(0), /* a LANE_UP_REQ is due */
    UCP_FAILOVER_ATTEMPT_SEND_ACK = UCS_BIT(1), /* a LANE_UP_ACK is due */
    UCP_FAILOVER_ATTEMPT_QUEUED   = UCS_BIT(2), /* on the uct_ep's pending
                                                   queue */
    UCP_FAILOVER_ATTEMPT_FAILED   = UCS_BIT(3), /* the connection failed */
    UCP_FAILOVER_ATTEMPT_AWAIT    = UCS_BIT(4)  /* waits for CONNECT_ACK */
};


/* Recovery state of one lane */
typedef struct ucp_failover_rec_lane {
    uct_pending_req_t uct;            /* sends what the attempt owes */
    ucp_ep_h          ep;
    ucp_lane_index_t  lane;
    uint8_t           flags;          /* UCP_FAILOVER_ATTEMPT_* */
    uint8_t           dev_addr_len;
    uint8_t           iface_addr_len;
    uint8_t           p2p;            /* connects to a peer endpoint */
    unsigned          path_index;
    void              *addr;          /* the peer's device, then interface
                                         address; NULL: cannot reconnect */
    uct_ep_h          uct_ep;         /* the attempt in flight, or NULL */
    uint32_t          token;          /* of our LANE_UP_REQ */
    uint32_t          ack_token;      /* of the peer's, to answer */
    ucs_time_t        deadline;       /* of the attempt in flight */
    ucs_time_t        next_attempt;
    ucs_time_t        failed_at;
    ucs_time_t        restored_at;    /* 0: never */
    double            delay;          /* current re-probe delay, seconds */
    unsigned          flaps;          /* failures soon after recoveries */
    uint32_t          attempts;       /* since the lane failed */
    uint32_t          total_attempts;
    uint32_t          recoveries;
    int               gave_up;
    /* What an operator reads (ucp_failover_vfs.c) */
    uint32_t          failures;       /* times the lane failed over */
    ucs_status_t      last_status;    /* of the last failure */
    double            last_failed_wall; /* wall clock, seconds; 0: never */
    char              last_reason[40];
} ucp_failover_rec_lane_t;


typedef struct ucp_failover_rec {
    /* The configuration before any lane failed: recovered lanes take their
     * roles back from it */
    ucp_worker_cfg_index_t  orig_cfg_index;
    ucp_failover_rec_lane_t lanes[UCP_MAX_LANES];
} ucp_failover_rec_t;


/**
 * Recovery: remember how to reach the peer's interface of each lane (copies
 * of the addresses wireup connected them to).
 */
void ucp_failover_recover_save(ucp_ep_h ep, const ucp_ep_config_key_t *key,
                               const ucp_unpacked_address_t *remote_address,
                               const unsigned *addr_indices);


/**
 * Recovery: @a lane is failing over now (before the endpoint changes its
 * configuration): schedule its re-probes.
 */
void ucp_failover_recover_lane_down(ucp_ep_h ep, ucp_lane_index_t lane,
                                    const char *reason, ucs_status_t status);


/** Recovery state of @a lane of the endpoint, or NULL (none kept) */
ucp_failover_rec_lane_t *ucp_failover_rec_lane(ucp_ep_h ep,
                                               ucp_lane_index_t lane);


/** Fragments (or, for stream 0, ordered messages) of stream @a id of the
 *  endpoint sent again so far */
uint64_t ucp_failover_seq_stream_resent(ucp_ep_h ep, uint8_t id);


/**
 * Recovery: a recovery message (LANE_UP_REQ, LANE_UP_ACK, LANE_UP, CONNECT,
 * CONNECT_ACK) for @a lane, followed by msg->addr_len bytes of @a addr.
 */
void ucp_failover_recover_msg(ucp_ep_h ep, ucp_lane_index_t lane,
                              const ucp_failover_msg_t *msg,
                              const void *addr);


/** Whether a recovery attempt of @a lane is in flight */
int ucp_failover_recover_in_flight(ucp_ep_h ep, ucp_lane_index_t lane);


/** Append the lane's re-probe and recovery counts, if any, to @a strb */
void ucp_failover_recover_lane_info(ucp_ep_h ep, ucp_lane_index_t lane,
                                    struct ucs_string_buffer *strb);


/**
 * A lane was found dead by a monitor (link event, probe): fail it over, or
 * fail the endpoint with @a status if it cannot live without it. Nothing
 * happens to a lane that already failed or is still being connected.
 */
void ucp_failover_ep_lane_fault(ucp_ep_h ep, ucp_lane_index_t lane,
                                const char *reason, ucs_status_t status);


/** What happened to a network device or port */
typedef enum {
    UCP_FAILOVER_LINK_NONE = 0,
    UCP_FAILOVER_LINK_UP,           /* administratively up, with carrier */
    UCP_FAILOVER_LINK_ADMIN_DOWN,   /* set down */
    UCP_FAILOVER_LINK_NO_CARRIER,   /* up, but lost carrier */
    UCP_FAILOVER_LINK_REMOVED,      /* the device went away */
    UCP_FAILOVER_LINK_PORT_ERR,     /* IB port error event */
    UCP_FAILOVER_LINK_PORT_ACTIVE,  /* IB port active event */
    UCP_FAILOVER_LINK_RESYNC        /* events were lost: look again */
} ucp_failover_link_event_t;


/** Name of a device event, for logs */
const char *ucp_failover_link_event_str(ucp_failover_link_event_t event);


/** The event that describes a network device with interface @a flags */
ucp_failover_link_event_t ucp_failover_link_flags_event(unsigned flags);


/** The current state of network device @a ifname, as an event */
ucp_failover_link_event_t ucp_failover_link_query(const char *ifname);


/** Whether network device @a netdev ("" when unknown: no) is down now */
int ucp_failover_link_is_down(const char *netdev);


/** Where the link watcher reports events (from the async context) */
typedef void (*ucp_failover_link_cb_t)(void *arg, const char *ifname,
                                       ucp_failover_link_event_t event);


typedef struct ucp_failover_link_watch ucp_failover_link_watch_t;


/**
 * Start watching the link state of every network device (rtnetlink) in
 * @a async; events of any device go to @a cb.
 */
ucs_status_t ucp_failover_link_watch_start(ucs_async_context_t *async,
                                           ucp_failover_link_cb_t cb,
                                           void *arg,
                                           ucp_failover_link_watch_t **watch_p);


/** Stop watching; no callback runs after it returns */
void ucp_failover_link_watch_stop(ucp_failover_link_watch_t *watch);


KHASH_SET_INIT_INT64(ucp_failover_rail_set);


/* The worker's failover endpoints to one peer worker: a probe round probes
 * one lane per rail (local resource) of them, not each endpoint's */
typedef struct ucp_failover_peer {
    uint64_t        uuid;        /* the peer worker's */
    ucs_list_link_t eps;         /* ucp_failover_ep_t.peer_list */
    ucp_tl_bitmap_t rails;       /* resources of their lanes */
    int             rails_stale; /* an endpoint joined, left or changed
                                    lanes: 'rails' is computed again */
} ucp_failover_peer_t;

KHASH_MAP_INIT_INT64(ucp_failover_peer_map, ucp_failover_peer_t*);

struct ucp_failover_rec_lane;
KHASH_MAP_INIT_INT64(ucp_failover_attempt_map, struct ucp_failover_rec_lane*);


/** One rail's (resource's) current event in the worker's log */
typedef struct ucp_failover_log_event {
    ucs_time_t first;     /* the first endpoint's time; 0: no event open */
    ucs_time_t last;      /* the last endpoint's time */
    unsigned   num_eps;   /* endpoints in the event */
    uint8_t    up;        /* lanes coming back (1) or failing (0) */
    size_t     num_moved; /* pending requests moved (failing) */
} ucp_failover_log_event_t;


/** The worker's log of rail events (ucp_failover_log.c) */
typedef struct ucp_failover_log {
    ucp_failover_log_event_t rsc[UCP_MAX_RESOURCES];
    ucs_log_level_t          level;     /* of the current endpoint's lines */
    uint64_t                 failures;  /* lane failures, total */
    uint64_t                 recoveries;/* lanes back, total */
    uint64_t                 moved;     /* pending requests moved, total */
    uint64_t                 redriven;  /* requests re-driven, of endpoints
                                           destroyed */
    unsigned                 failed_now;/* failed lanes of live endpoints */
    ucs_time_t               degraded_since;
    ucs_time_t               degraded;  /* total time failed_now > 0 */
    ucs_time_t               start;
} ucp_failover_log_t;


/** The worker's rail monitor */
typedef struct ucp_failover_worker {
    ucp_worker_h              worker;
    ucp_failover_link_watch_t *link;           /* NULL: not watching */
    /* A progress handler is queued (atomic) */
    volatile uint32_t         event_scheduled;
    /* Device event of each resource not handled yet, or LINK_NONE (atomic) */
    volatile uint8_t          rsc_event[UCP_MAX_RESOURCES];
    /* Network device of each resource, or "" */
    char                      netdev[UCP_MAX_RESOURCES][IFNAMSIZ];
    int                       probe_timer_id;  /* async timer, or -1 */
    int                       probe_scheduled; /* probe round queued */
    uint64_t                  probe_rounds;    /* probe rounds run */
    uint64_t                  probes_sent;     /* lanes probed, total */
    uint64_t                  probe_wakeups;   /* user wakeups for rounds */
    unsigned                  round_eps;       /* failover eps, last round */
    uint64_t                  round_visits;    /* endpoints looked at by
                                                  probe rounds, total */
    /* Endpoints the next round tends (ucp_failover_ep_t.round_list): only
     * those with work, healthy idle ones are not walked */
    ucs_list_link_t           round_eps_list;
    /* Failover endpoints by peer worker (probe walks) */
    khash_t(ucp_failover_peer_map) peers;
    /* Rails whose every lane the next round probes (a lane on it failed),
     * and those the current round does (a round that finds a dead lane
     * verifies its rail in the same round and in the next) */
    khash_t(ucp_failover_rail_set) verify_rails;
    khash_t(ucp_failover_rail_set) verify_now;
    /* Walking the worker's endpoints: what may destroy one is deferred */
    int                       walking;
    /* Resources that had a link-up or port-active event (atomic) */
    volatile uint8_t          rsc_up[UCP_MAX_RESOURCES];
    /* Recovery: attempts in flight, by their transport endpoint */
    khash_t(ucp_failover_attempt_map) attempts;
    /* Rails with an attempt in flight (rebuilt every round) */
    khash_t(ucp_failover_rail_set) busy_rails;
    /* Rails a lane just came back on: their lanes try at once */
    khash_t(ucp_failover_rail_set) healed_rails;
    /* Resources with a link-up event not acted on yet */
    uint8_t                   up_events[UCP_MAX_RESOURCES];
    /* Resources whose network device was down (no carrier, down, gone) at
     * its last link event: their failed lanes are not re-probed until a
     * link-up event (a connect over a dead link only fails, and RC logs
     * it as an error) */
    uint8_t                   link_down[UCP_MAX_RESOURCES];
    uint32_t                  token_seq;       /* last attempt token */
    ucp_failover_log_t        log;             /* rail events, summary */
    ucs_time_t                log_window;      /* recovery log rate limit */
    unsigned                  log_count;
    unsigned                  log_suppressed;
    ucp_failover_pool_t       *pool;           /* buffers, or NULL */
    /* Endpoints that negotiated failover (ucp_failover_ep_t.list): what
     * the probe rounds and device events walk, not all endpoints */
    ucs_list_link_t           eps;
} ucp_failover_worker_t;


/** @a ep negotiated failover (it stays in the worker's list until it is
 *  destroyed, even if a later negotiation fails), or is destroyed */
void ucp_failover_worker_ep_add(ucp_ep_h ep);
void ucp_failover_worker_ep_remove(ucp_ep_h ep);


/** Put @a fo's endpoint on the list the next probe round tends */
void ucp_failover_round_add(ucp_failover_ep_t *fo);


/**
 * The endpoint has work for the next probe round: a lane to connect, wrap or
 * recover, an acknowledgement or a backlog owed, a CM loss to decide. The
 * round keeps it while the work lasts; endpoints without any are not walked.
 * A no-op for an endpoint that did not negotiate failover.
 */
static UCS_F_ALWAYS_INLINE void ucp_failover_round_want(ucp_failover_ep_t *fo)
{
    if (ucs_unlikely(!(fo->flags & UCP_FAILOVER_EP_FLAG_ROUND))) {
        ucp_failover_round_add(fo);
    }
}


/** Set up the worker's log of rail events */
void ucp_failover_log_init(ucp_failover_log_t *log);


/**
 * A lane on @a rsc_index of an endpoint of @a worker failed (@a up = 0) or
 * came back (1): the endpoint's lines about it are logged at
 * ucp_failover_log_level() until ucp_failover_log_level_reset() (info for
 * the first endpoint of a rail event, debug for the others).
 */
void ucp_failover_log_lane_event(ucp_worker_h worker,
                                 ucp_rsc_index_t rsc_index, int up);


/** @a count pending requests moved off a failed lane on @a rsc_index */
void ucp_failover_log_moved(ucp_worker_h worker, ucp_rsc_index_t rsc_index,
                            size_t count);


/** The level of the current endpoint's lines (see above) */
ucs_log_level_t ucp_failover_log_level(ucp_worker_h worker);
void ucp_failover_log_level_reset(ucp_worker_h worker);


/** An endpoint with @a failed_lanes failed lanes is destroyed */
void ucp_failover_log_ep_gone(ucp_worker_h worker, unsigned failed_lanes,
                              uint64_t redriven);


/** In each probe round: rail events no endpoint joined for a while end */
void ucp_failover_log_round(ucp_worker_h worker);


/** At the worker's cleanup: end every event, log the worker's summary */
void ucp_failover_log_cleanup(ucp_worker_h worker);


/** Start the worker's lane probes (an async timer) */
ucs_status_t ucp_failover_probe_start(ucp_failover_worker_t *fw);


/** Stop them; no probe round runs after it returns */
void ucp_failover_probe_stop(ucp_failover_worker_t *fw);


/** A rail to a peer, as a hash key: a local resource and the peer's UUID */
uint64_t ucp_failover_rail_key(ucp_rsc_index_t rsc_index, uint64_t peer_uuid);


/** Queue a probe round (which also runs lane recovery) */
void ucp_failover_probe_schedule(ucp_failover_worker_t *fw);


/** A CLOSING message from the peer of @a ep */
void ucp_failover_cm_peer_closing(ucp_ep_h ep);


/** In each probe round, for the endpoints it tends: decide a pending CM
 *  loss; whether one is still pending */
int ucp_failover_cm_check(ucp_failover_worker_t *fw, ucp_ep_h ep);


/** Recovery state of the worker: set up and released with the monitor */
void ucp_failover_recover_init(ucp_failover_worker_t *fw);
void ucp_failover_recover_cleanup(ucp_failover_worker_t *fw);


/** Recovery, in each probe round: before, for each endpoint it tends
 *  (whether the endpoint still has failed lanes to recover), and after */
void ucp_failover_recover_round_begin(ucp_failover_worker_t *fw);
int ucp_failover_recover_ep(ucp_failover_worker_t *fw, ucp_ep_h ep);
void ucp_failover_recover_round_end(ucp_failover_worker_t *fw);


/**
 * A lane of @a failed_ep on @a rsc_index failed: probe at once the lanes of
 * the worker's other endpoints to the same peer on the same resource, which
 * share its path.
 */
void ucp_failover_probe_rail(ucp_ep_h failed_ep, ucp_rsc_index_t rsc_index);


/**
 * The entry point of every device event (link watcher, IB port events,
 * tests): a device named @a dev_name (a netdev, or a UCT device name such as
 * "mlx5_0:1") changed state. Safe from any thread; the lanes on a device
 * that went down fail over from the worker's progress.
 */
void ucp_failover_worker_device_event(ucp_worker_h worker,
                                      const char *dev_name,
                                      ucp_failover_link_event_t event);

#endif
