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

#include <ucs/async/async_fwd.h>
#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/queue_types.h>

#include <net/if.h>


/** The endpoint's failover state */
ucp_failover_ep_t *ucp_failover_ep(ucp_ep_h ep);


/** Whether @a lane may fail over (else its failure fails the endpoint) */
int ucp_failover_lane_can_fail(ucp_ep_h ep, ucp_lane_index_t lane);


/**
 * Fail over @a lane: mark it FAILED, switch the endpoint to a configuration
 * without it, discard its UCT endpoint and replay its pending requests;
 * optionally tell the peer.
 */
ucs_status_t ucp_failover_lane_down(ucp_ep_h ep, ucp_lane_index_t lane,
                                    const char *reason, ucs_status_t status,
                                    int notify_peer);


/** Send purged pending requests again under the current configuration */
void ucp_failover_replay(ucp_ep_h ep, ucs_queue_head_t *replay_q);


/** Make a purged pending request follow the endpoint's new configuration */
void ucp_failover_reroute(ucp_request_t *req);


/** Tell the peer that @a lane failed (a LANE_DOWN message) */
void ucp_failover_wire_lane_down(ucp_ep_h ep, ucp_lane_index_t lane);


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
    /* Rails (resource, peer) probed in the current round */
    khash_t(ucp_failover_rail_set) probed_rails;
    /* Rails whose every lane the next round probes (a lane on it failed) */
    khash_t(ucp_failover_rail_set) verify_rails;
    /* Walking the worker's endpoints: what may destroy one is deferred */
    int                       walking;
} ucp_failover_worker_t;


/** Start the worker's lane probes (an async timer) */
ucs_status_t ucp_failover_probe_start(ucp_failover_worker_t *fw);


/** Stop them; no probe round runs after it returns */
void ucp_failover_probe_stop(ucp_failover_worker_t *fw);


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
