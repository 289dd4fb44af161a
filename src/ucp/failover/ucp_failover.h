/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCP_FAILOVER_H_
#define UCP_FAILOVER_H_

#include <ucp/core/ucp_types.h>
#include <ucs/config/parser.h>
#include <ucs/datastruct/callbackq.h>
#include <ucs/datastruct/list.h>
#include <ucs/type/status.h>

#include <stdio.h>

struct ucs_string_buffer;


/**
 * Version of the failover wire protocol (control messages, sequencing
 * trailers), advertised with the failover bit of every packed interface
 * (address.c). Two peers fail over only when they run the same version; a
 * peer with another one is treated as a stock peer. Raise it with every
 * change of what goes on the wire. At most 8 (three bits carry it).
 * 1: issue 24; 2: the RESEND flag of an acknowledgement (session 18); 3:
 * LANE_UP_REQ and LANE_UP_ACK carry the sender's last lane_sn (session 38).
 */
#define UCP_FAILOVER_WIRE_VERSION 3


/**
 * Multi-rail failover configuration, read from the UCX_MULTIRAIL_* environment
 * variables through UCP's own configuration table.
 */
typedef struct ucp_multirail_config {
    /** UCX_MULTIRAIL_FAILOVER: a failed lane fails over to surviving lanes */
    int           enable;
    /** UCX_MULTIRAIL_LINK_EVENTS: fail lanes on link-down events */
    int           link_events;
    /** UCX_MULTIRAIL_PROBE_INTERVAL: idle-lane liveness probe interval */
    double        probe_interval;
    /** UCX_MULTIRAIL_PROBE_TIMEOUT: unanswered work/probes fail the lane */
    double        probe_timeout;
    /** UCX_MULTIRAIL_REPROBE_INTERVAL: first re-probe delay of a failed lane */
    double        reprobe_interval;
    /** UCX_MULTIRAIL_REPROBE_MAX_INTERVAL: cap of the re-probe backoff */
    double        reprobe_max_interval;
    /** UCX_MULTIRAIL_REPROBE_MAX_ATTEMPTS: re-probes per failure, or inf */
    unsigned long reprobe_max_attempts;
    /** UCX_MULTIRAIL_RETAIN: bound of unacknowledged messages kept per
     *  endpoint for sending again, bytes of the buffers holding them */
    size_t        retain;
    /** UCX_MULTIRAIL_RETAIN_WORKER: the same bound for all the endpoints of
     *  a worker together */
    size_t        retain_worker;
    /** UCX_MULTIRAIL_STRIPE_AM: message fragments stripe over the lanes,
     *  each lane's sequenced as a data stream */
    int           stripe_am;
    /** UCX_MULTIRAIL_REF_THRESH: zero-copy messages of at least this size
     *  are sent by reference (from the user's buffer, completed when the
     *  peer acknowledges them), smaller ones copied; SIZE_MAX: all copied;
     *  UCS_MEMUNITS_AUTO: by transport (ucp_failover_ref_thresh()) */
    size_t        ref_thresh;
} ucp_multirail_config_t;


/**
 * The UCX_MULTIRAIL_* fields, embedded (with no prefix of its own) in UCP's
 * configuration table.
 */
extern ucs_config_field_t ucp_multirail_config_table[];


struct ucp_context_config;


/**
 * Check the values of the multi-rail configuration against each other and
 * against the rest of the context's configuration (combinations failover
 * does not support). Logs a clear error naming the offending variables.
 *
 * @param [in] ctx_config  Parsed context configuration.
 *
 * @return UCS_OK, or UCS_ERR_INVALID_PARAM if the values are inconsistent.
 */
ucs_status_t
ucp_multirail_config_check(const struct ucp_context_config *ctx_config);


/**
 * The size from which a zero-copy message is sent by reference over a
 * transport: UCX_MULTIRAIL_REF_THRESH, or with "auto" 0 (every one) where
 * the transport's memory domain needs memory handles and SIZE_MAX (none)
 * elsewhere.
 *
 * @param [in] context    UCP context.
 * @param [in] need_memh  Whether the transport's memory domain needs memory
 *                        handles (UCT_MD_FLAG_NEED_MEMH).
 */
size_t ucp_failover_ref_thresh(ucp_context_h context, int need_memh);



/** Per-endpoint failover flags */
enum {
    /* Both peers run failover: lanes may fail one by one */
    UCP_FAILOVER_EP_FLAG_NEGOTIATED   = UCS_BIT(0),
    /* The peer announced that it closes the endpoint (CLOSING) */
    UCP_FAILOVER_EP_FLAG_PEER_CLOSING = UCS_BIT(1),
    /* The CM connection went away: a close or a loss, to be told apart */
    UCP_FAILOVER_EP_FLAG_CM_PENDING   = UCS_BIT(2),
    /* The CM connection was lost; the endpoint lives on its data lanes */
    UCP_FAILOVER_EP_FLAG_CM_LOST      = UCS_BIT(3),
    /* Message fragments stripe over the am_bw lanes (data streams) */
    UCP_FAILOVER_EP_FLAG_STRIPE       = UCS_BIT(4),
    /* In the worker's list of endpoints the next probe round tends (a lane
     * to connect, wrap or recover, an acknowledgement or backlog owed, a
     * CM loss to decide) */
    UCP_FAILOVER_EP_FLAG_ROUND        = UCS_BIT(5)
};


/**
 * Per-endpoint failover state, kept in the endpoint's control extension
 * (zero-initialised with it).
 */
typedef struct ucp_failover_ep {
    uint8_t          flags;                    /* UCP_FAILOVER_EP_FLAG_* */
    ucp_lane_map_t   failed_lanes;             /* Lanes in FAILED state */
    ucp_lane_map_t   peer_lane_valid;          /* Which peer_lane[] are known */
    ucp_lane_index_t peer_lane[UCP_MAX_LANES]; /* The peer's index of a lane */
    uint16_t         tx_lane_sn[UCP_MAX_LANES];/* Last lane_sn sent, per lane */
    uint16_t         rx_lane_sn[UCP_MAX_LANES];/* Last lane_sn handled */
    uint16_t         num_failovers;            /* Lane failovers so far */
    uint64_t         peer_uuid;                /* The peer worker's UUID */
    uint32_t         num_restarts;             /* Restarts since the last
                                                  lane failover */
    uint32_t         num_redriven;             /* Requests re-driven, total */
    uint64_t         redriven_bytes;           /* Rendezvous bytes sent again */
    uint32_t         num_recoveries;           /* Lanes brought back */
    ucs_time_t       cm_deadline;              /* CM_PENDING decided then */
    struct ucp_failover_rec *rec;              /* Recovery state, or NULL */
    struct ucp_failover_seq *seq;              /* Sequencing state, or NULL */
    ucs_list_link_t  list;                     /* In the worker's failover
                                                  endpoints once NEGOTIATED
                                                  (next NULL: not in it) */
    ucp_ep_h         ep;                       /* This endpoint (walks of
                                                  that list) */
    ucs_list_link_t  round_list;               /* In the worker's list of
                                                  endpoints with round work
                                                  (FLAG_ROUND) */
    struct ucp_failover_peer *peer;            /* Its peer's endpoints (probe
                                                  walks), once in 'list' */
    ucs_list_link_t  peer_list;                /* In peer->eps */
} ucp_failover_ep_t;


#define ucp_failover_is_enabled(_context) \
    ((_context)->config.ext.multirail.enable)


/**
 * The failover state of every endpoint of a context that runs no failover:
 * all zero (no lane failed, nothing negotiated), shared and read-only, so
 * that such an endpoint carries a pointer and no state (a write to it is a
 * bug, and faults).
 */
extern const ucp_failover_ep_t ucp_failover_ep_inactive;


/** Bytes of failover state an endpoint of @a _context carries after its
 *  control extension: none if the context runs no failover */
#define ucp_failover_ep_size(_context) \
    (ucp_failover_is_enabled(_context) ? sizeof(ucp_failover_ep_t) : 0)


/** The failover state of a new endpoint of @a _context: @a _mem (the
 *  zeroed ucp_failover_ep_size() bytes after its control extension), or the
 *  shared inactive state */
#define ucp_failover_ep_state(_context, _mem) \
    (ucp_failover_is_enabled(_context) ? \
             (ucp_failover_ep_t*)(_mem) : \
             (ucp_failover_ep_t*)&ucp_failover_ep_inactive)


/**
 * Worker hooks: start the worker's rail monitor (link events of the network
 * devices behind its interfaces, liveness probes of its lanes) when failover
 * is enabled, and stop it. A monitor that cannot start is logged, and the
 * worker runs without it.
 */
void ucp_failover_worker_init(ucp_worker_h worker);


/** Bytes the worker holds in failover buffers (retained messages,
 *  rendezvous fragment trackers), which UCX_MULTIRAIL_RETAIN_WORKER bounds */
size_t ucp_failover_worker_held(ucp_worker_h worker);

/** The worker's failover buffers (NULL: none; tests) */
struct ucp_failover_pool *ucp_failover_worker_pool(ucp_worker_h worker);
void ucp_failover_worker_cleanup(ucp_worker_h worker);


/**
 * Interface parameters hook: with failover enabled, ask the transport to
 * report an endpoint whose path stopped answering within
 * UCX_MULTIRAIL_PROBE_TIMEOUT (uct_iface_params_t::failure_timeout): TCP
 * derives TCP_USER_TIMEOUT, its least retransmission timeout and a
 * non-blocking connect from it, RC its QPs' timeout and retry count.
 */
void ucp_failover_iface_params(ucp_worker_h worker,
                               uct_iface_params_t *iface_params);


/**
 * Wireup hook, after lane selection: decide whether failover is used on the
 * endpoint, from the remote interfaces its lanes connect to (every one must
 * advertise it); and if lanes of the endpoint already failed over, take them
 * out of the re-selected @a key as well, so that a late wireup message does
 * not ask for a different configuration.
 */
void ucp_failover_ep_negotiate(ucp_ep_h ep, ucp_ep_config_key_t *key,
                               const ucp_unpacked_address_t *remote_address,
                               const unsigned *addr_indices);


/**
 * Wireup hook: remember the peer's index of each local lane, when wireup
 * computed it (the side that processes the connection request).
 */
void ucp_failover_ep_set_peer_lanes(ucp_ep_h ep,
                                    const ucp_lane_index_t *lanes2remote);


/**
 * Transport error hook: a UCT endpoint of @a lane failed. Fail over that lane
 * only, if the endpoint can live without it.
 *
 * @return UCS_OK if the lane failed over and the endpoint lives on; an error
 *         if the endpoint must fail as it does without failover.
 */
ucs_status_t ucp_failover_lane_error(ucp_ep_h ep, ucp_lane_index_t lane,
                                     ucs_status_t status);


/** What a rendezvous must send again after a lane failure (opaque) */
typedef struct ucp_failover_rndv_redo ucp_failover_rndv_redo_t;


/**
 * Rendezvous fragment hooks, for a GET/PUT zcopy rendezvous whose failure
 * ucp_failover_rndv_restart() handles. Before posting a fragment of @a length
 * bytes at @a offset: the completion to post it with (the request's own, or
 * one that records the fragment's range if it fails). After posting it:
 * release that completion unless the transport took it (UCS_INPROGRESS);
 * if posting failed, what the request skips is lost too.
 */
uct_completion_t *ucp_failover_rndv_frag_comp(ucp_request_t *req,
                                              size_t offset, size_t length);
void ucp_failover_rndv_frag_posted(ucp_request_t *req, uct_completion_t *comp,
                                   ucs_status_t status);


/**
 * Rendezvous fragment hooks, while a restarted rendezvous sends its lost
 * ranges again (req->send.rndv.fo_redo is set): clip a fragment of
 * @a length bytes at the request's offset to the current range; after it is
 * posted, move the request's offset to the next range, or to the end.
 */
size_t ucp_failover_rndv_frag_clip(ucp_request_t *req, size_t length);
void ucp_failover_rndv_frag_next(ucp_request_t *req);


/**
 * Rendezvous lane hook: the endpoint's configuration changed (lanes failed
 * over or came back) since the lanes of @a req (a rendezvous doing GET or
 * PUT zcopy, @a proto) were chosen. Take them again from the current
 * configuration, with the remote key's transport key for each.
 */
void ucp_failover_rndv_relane(ucp_request_t *req, unsigned proto);


/**
 * Rendezvous completion hook: the data transfer of @a req (a rendezvous send
 * or receive doing GET or PUT zcopy, @a proto) completed with an error. If
 * the endpoint can fail over, send the ranges that failed again on the
 * surviving lanes (all of the data if they are not known).
 *
 * @return 1 if the request was taken over (it will complete later), 0 if it
 *         must complete with the error as it does without failover.
 */
int ucp_failover_rndv_restart(ucp_request_t *req, unsigned proto);


/**
 * Purge hook (ucp_ep_req_purge): the send request @a req is about to be
 * completed with an error because its endpoint failed. Cancels a
 * rendezvous restart still queued for it and frees its ranges, so nothing
 * refers to the request after it is released.
 */
void ucp_failover_req_purge(ucp_request_t *req);


/**
 * RMA completion hook: the put or get @a req (basic protocol, all of it
 * posted) completed with an error. If the endpoint can fail over, send it
 * again, whole, on the current lanes.
 *
 * @return 1 if the request was taken over (it completes later), 0 if it must
 *         complete with the error as without failover.
 */
int ucp_failover_rma_restart(ucp_request_t *req);


/**
 * RMA hook: a basic put or get goes on with zero copy on its lane, whose
 * memory domain its buffer has no handle for (failover changed the
 * endpoint's configuration under it): register what is left of the buffer
 * for that domain. If that fails, the request completes with the error.
 *
 * @return UCS_OK: the fragment can be posted; else the request completed.
 */
ucs_status_t ucp_failover_rma_zcopy_reg(ucp_request_t *req);


/**
 * RMA hook: @a req posted its last fragment on an endpoint that negotiated
 * failover. A basic put whose last fragment went out short or bcopy (which
 * would complete now, or with the zero-copy fragments before it, before
 * the peer has the tail) completes instead when its lane has acknowledged
 * it, and counts in the endpoint's flush state until then; a lane failure
 * before that sends it again. Any other request completes as without
 * failover.
 *
 * @return what the request's progress function returns.
 */
ucs_status_t ucp_failover_rma_posted(ucp_request_t *req);


/**
 * RMA/AMO progress hook (basic protocol): the endpoint's configuration
 * changed while @a req was in progress (a lane failed over or came back),
 * so the cache of its rkey, shared with other requests, may be resolved for
 * another configuration: its remote key would belong to another lane's
 * memory domain. Resolve it for the current configuration, move the request
 * to the lane (and protocol) that gives, register a zero-copy buffer again
 * if that lane's memory domain needs it, and progress the request there.
 *
 * @return what the request's progress function returns.
 */
ucs_status_t ucp_failover_rkey_req_refresh(ucp_request_t *req);


/**
 * Flush completion hook: the flush request @a req completed with an error.
 * If the endpoint can fail over, flush its current lanes again (the failed
 * ones are skipped), resuming through @a flush_cb.
 *
 * @return 1 if the flush was restarted, 0 if it must complete with the error.
 */
int ucp_failover_flush_restart(ucp_request_t *req, ucs_callback_t flush_cb);


/**
 * Close hook (ucp_ep_close_nbx): a client/server endpoint that negotiated
 * failover tells its peer that it closes (CLOSING on the am lane), so that
 * the peer tells the CM disconnect that follows from a lost CM connection.
 */
void ucp_failover_ep_close(ucp_ep_h ep);


/**
 * CM remote-disconnect hook: the peer's CM connection went away while the
 * endpoint is connected and not closed. Unless the peer announced a close,
 * failover takes it over: the endpoint lives on its data lanes if no CLOSING
 * arrives within a short wait.
 *
 * @return 1 if failover took the disconnect over, 0 for stock handling.
 */
int ucp_failover_cm_disconnected(ucp_ep_h ep);


/**
 * Endpoint destruction hook: stop the endpoint's lane recovery attempts and
 * release its recovery state.
 */
void ucp_failover_ep_destroy(ucp_ep_h ep);


/**
 * Transport error hook, before the lane that owns @a uct_ep is looked up:
 * @a uct_ep may be a lane recovery attempt, which belongs to no lane yet.
 *
 * @return 1 if failover took the error (the attempt failed and is retried
 *         later), 0 if @a uct_ep is not failover's.
 */
int ucp_failover_uct_ep_error(ucp_worker_h worker, uct_ep_h uct_ep,
                              ucs_status_t status);


/**
 * Request fast-forward hook (the endpoint failed, its pending requests are
 * completed with an error): release @a req if it is a failover message.
 *
 * @return 1 if @a req was a failover message and is released, else 0.
 */
int ucp_failover_request_ff(ucp_request_t *req);


/**
 * Interface attributes hook (after uct_iface_query) of resource @a rsc_index:
 * with failover enabled, the active message limits UCP sees leave room for
 * the sequencing trailer, zero-copy active messages are offered only where
 * the retained copy they are sent from needs no memory handle, and network
 * devices offer no device atomics (atomics go on the sequenced am lane).
 */
void ucp_failover_iface_attr(ucp_worker_h worker, ucp_rsc_index_t rsc_index,
                             uct_iface_attr_t *attr);


/**
 * Wireup hook: the endpoint is connected both ways. If it negotiated
 * failover, its am lane starts sequencing its messages (exactly-once,
 * in-order delivery across a change of the am lane).
 */
void ucp_failover_seq_ep_connected(ucp_ep_h ep);


/**
 * Endpoint creation hook (to a worker address): whether the endpoint must
 * learn its peer endpoint's id at once, as failover's sequencing needs it.
 */
int ucp_failover_ep_needs_remote_id(ucp_ep_h ep);


/**
 * Discard hook: the transport endpoint a sequencing endpoint wraps (which
 * is released), or @a uct_ep itself.
 */
uct_ep_h ucp_failover_seq_unwrap(uct_ep_h uct_ep);


/** Lane lookup hook: whether @a uct_ep is a sequencing endpoint over
 *  @a owned_ep */
int ucp_failover_seq_is_owner(uct_ep_h uct_ep, uct_ep_h owned_ep);


/** Whether @a lane of the endpoint failed over (it holds a failed stub) */
int ucp_failover_lane_is_failed(ucp_ep_h ep, ucp_lane_index_t lane);


/** Name of the lane's state: "up", "failed" or "recovering" */
const char *ucp_failover_lane_state_str(ucp_ep_h ep, ucp_lane_index_t lane);


/**
 * ucp_ep_print_info() hooks: the lane's state appended to its line, and a
 * summary line; both print nothing with failover off.
 */
void ucp_failover_ep_lane_info_str(ucp_ep_h ep, ucp_lane_index_t lane,
                                   struct ucs_string_buffer *strb);
void ucp_failover_ep_print(ucp_ep_h ep, FILE *stream);


/**
 * ucp_ep_vfs_init() hook: a "failover" directory in the endpoint's VFS node
 * (lanes, am_lane, summary), read when an operator reads it; nothing with
 * failover off.
 */
void ucp_failover_ep_vfs_init(ucp_ep_h ep);

#endif
