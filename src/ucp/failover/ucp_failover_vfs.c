/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * Lane state of a running process for an operator: a "failover" directory
 * in each endpoint's VFS node (with UCX's ucx_vfs daemon running, under
 * /tmp/ucx/<pid>/ucp/worker/.../ep/<ep>/failover/), read without stopping
 * the process:
 *   lanes     one line per lane: its transport/device, state (up, failed,
 *             recovering, given-up), failures and re-probes so far, returns,
 *             the time and reason of its last failure, what was sent again
 *             of its data stream
 *   am_lane   the endpoint's current am lane
 *   summary   the endpoint's totals
 * Every value is computed when the file is read, under the worker's async
 * lock (as UCP's own VFS refresh); nothing is kept for it but four fields
 * of each lane's recovery state.
 *
 * Imports: lane state (lane.c), recovery state (recover.c), sequencing
 * counters (seq.c); nothing imports it but the endpoint's VFS hook.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucp_failover.h"
#include "ucp_failover_int.h"

#include <ucp/core/ucp_context.h>
#include <ucp/core/ucp_ep.h>
#include <ucp/core/ucp_ep.inl>
#include <ucp/core/ucp_worker.h>
#include <ucs/async/async.h>
#include <ucs/datastruct/string_buffer.h>
#include <ucs/time/time.h>
#include <ucs/vfs/base/vfs_obj.h>


static void ucp_failover_vfs_lane_name(ucp_ep_h ep, ucp_lane_index_t lane,
                                       ucs_string_buffer_t *strb)
{
    ucp_rsc_index_t rsc_index = ucp_ep_get_rsc_index(ep, lane);
    const uct_tl_resource_desc_t *tl;

    if (rsc_index == UCP_NULL_RESOURCE) {
        ucs_string_buffer_appendf(strb, "-");
        return;
    }

    tl = &ep->worker->context->tl_rscs[rsc_index].tl_rsc;
    ucs_string_buffer_appendf(strb, "%s/%s", tl->tl_name, tl->dev_name);
}

static const char *ucp_failover_vfs_lane_state(ucp_ep_h ep,
                                               ucp_lane_index_t lane)
{
    ucp_failover_rec_lane_t *rl = ucp_failover_rec_lane(ep, lane);

    if (!ucp_failover_lane_is_failed(ep, lane)) {
        return "up";
    } else if ((rl != NULL) && rl->gave_up) {
        return "given-up";
    }

    return ucp_failover_lane_state_str(ep, lane);
}

static void ucp_failover_vfs_read_lanes(void *obj, ucs_string_buffer_t *strb,
                                        void *arg_ptr, uint64_t arg_u64)
{
    ucp_ep_h ep  = obj;
    double now   = ucs_get_accurate_time();
    ucp_failover_rec_lane_t *rl;
    ucp_lane_index_t lane;

    UCS_ASYNC_BLOCK(&ep->worker->async);
    for (lane = 0; lane < ucp_ep_num_lanes(ep); ++lane) {
        if (lane == ucp_ep_get_cm_lane(ep)) {
            continue;
        }

        rl = ucp_failover_rec_lane(ep, lane);
        ucs_string_buffer_appendf(strb, "lane=%d transport=", lane);
        ucp_failover_vfs_lane_name(ep, lane, strb);
        ucs_string_buffer_appendf(strb, " state=%s failures=%u reprobes=%u "
                                  "returns=%u",
                                  ucp_failover_vfs_lane_state(ep, lane),
                                  (rl != NULL) ? rl->failures : 0,
                                  (rl != NULL) ? rl->total_attempts : 0,
                                  (rl != NULL) ? rl->recoveries : 0);
        if ((rl != NULL) && (rl->last_failed_wall != 0)) {
            ucs_string_buffer_appendf(strb, " last_failure=%.3f "
                                      "last_failure_ago=%.1fs "
                                      "last_reason=\"%s%s%s\"",
                                      rl->last_failed_wall,
                                      now - rl->last_failed_wall,
                                      rl->last_reason,
                                      (rl->last_status != UCS_OK) ? ": " : "",
                                      (rl->last_status != UCS_OK) ?
                                      ucs_status_string(rl->last_status) : "");
        } else {
            ucs_string_buffer_appendf(strb, " last_failure=- "
                                      "last_failure_ago=- last_reason=-");
        }
        /* a data lane's stream: its fragments sent again on the am lane */
        ucs_string_buffer_appendf(strb, " fragments_resent=%" PRIu64 "\n",
                                  ucp_failover_seq_stream_resent(ep,
                                                                 1 + lane));
    }
    UCS_ASYNC_UNBLOCK(&ep->worker->async);
}

static void ucp_failover_vfs_read_am_lane(void *obj, ucs_string_buffer_t *strb,
                                          void *arg_ptr, uint64_t arg_u64)
{
    ucp_ep_h ep = obj;
    ucp_lane_index_t am_lane;

    UCS_ASYNC_BLOCK(&ep->worker->async);
    am_lane = ucp_ep_get_am_lane(ep);
    if (am_lane == UCP_NULL_LANE) {
        ucs_string_buffer_appendf(strb, "lane=- transport=-\n");
    } else {
        ucs_string_buffer_appendf(strb, "lane=%d transport=", am_lane);
        ucp_failover_vfs_lane_name(ep, am_lane, strb);
        ucs_string_buffer_appendf(strb, "\n");
    }
    UCS_ASYNC_UNBLOCK(&ep->worker->async);
}

static void ucp_failover_vfs_read_summary(void *obj, ucs_string_buffer_t *strb,
                                          void *arg_ptr, uint64_t arg_u64)
{
    ucp_ep_h ep           = obj;
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);

    UCS_ASYNC_BLOCK(&ep->worker->async);
    ucs_string_buffer_appendf(strb, "negotiated=%s cm=%s lane_failovers=%u "
                              "lane_returns=%u failed_lanes=0x%x "
                              "requests_redriven=%u rndv_bytes_resent=%" PRIu64
                              " ordered_messages_resent=%" PRIu64 "\n",
                              (fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) ?
                              "yes" : "no",
                              (fo->flags & UCP_FAILOVER_EP_FLAG_CM_LOST) ?
                              "lost" : "ok",
                              fo->num_failovers, fo->num_recoveries,
                              fo->failed_lanes, fo->num_redriven,
                              fo->redriven_bytes,
                              ucp_failover_seq_stream_resent(ep, 0));
    UCS_ASYNC_UNBLOCK(&ep->worker->async);
}

void ucp_failover_ep_vfs_init(ucp_ep_h ep)
{
    if (!ucp_failover_is_enabled(ep->worker->context)) {
        return;
    }

    ucs_vfs_obj_add_ro_file(ep, ucp_failover_vfs_read_lanes, NULL, 0,
                            "failover/lanes");
    ucs_vfs_obj_add_ro_file(ep, ucp_failover_vfs_read_am_lane, NULL, 0,
                            "failover/am_lane");
    ucs_vfs_obj_add_ro_file(ep, ucp_failover_vfs_read_summary, NULL, 0,
                            "failover/summary");
}
