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

#include <ucs/datastruct/queue_types.h>


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

#endif
