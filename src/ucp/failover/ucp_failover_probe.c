/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * Lane liveness probes ("who notices a path died", silent side): a link that
 * stays up but drops traffic is seen only through traffic that is not
 * answered. A busy lane's transport already waits for answers (over TCP,
 * TCP_USER_TIMEOUT bounds it to UCX_MULTIRAIL_PROBE_TIMEOUT); an idle lane
 * gets a transport keepalive (uct_ep_check) every UCX_MULTIRAIL_PROBE_INTERVAL,
 * so it has something outstanding as well, and its transport reports an
 * error when that stays unanswered. Reported errors come back through the
 * worker's transport error handler, as any lane error does.
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
#include <ucp/wireup/wireup_ep.h>
#include <uct/base/uct_worker.h>
#include <ucs/async/async.h>
#include <ucs/debug/log.h>


static unsigned ucp_failover_probe_progress(void *arg);

static void ucp_failover_probe_ep(ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    char reason[64];
    ucs_status_t status;
    ucp_lane_index_t lane;
    uct_ep_h uct_ep;

    if (!(fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) ||
        (ep->flags & UCP_EP_FLAG_FAILED) ||
        (ep->cfg_index == UCP_WORKER_CFG_INDEX_NULL)) {
        return;
    }

    for (lane = 0; lane < ucp_ep_num_lanes(ep); ++lane) {
        uct_ep = ep->uct_eps[lane];
        if ((lane == ucp_ep_get_cm_lane(ep)) || (uct_ep == NULL) ||
            (fo->failed_lanes & UCS_BIT(lane)) || ucp_wireup_ep_test(uct_ep)) {
            continue;
        }

        /* A lane busy sending returns UCS_OK without a probe: what it has
         * outstanding is probe enough */
        status = uct_ep_check(uct_ep, 0, NULL);
        if ((status == UCS_OK) || (status == UCS_ERR_UNSUPPORTED) ||
            (status == UCS_ERR_NO_RESOURCE)) {
            continue;
        }

        ucs_snprintf_zero(reason, sizeof(reason), "probe failed");
        ucp_failover_ep_lane_fault(ep, lane, reason, status);
        if (ep->flags & UCP_EP_FLAG_FAILED) {
            return;
        }
    }
}

static unsigned ucp_failover_probe_progress(void *arg)
{
    ucp_failover_worker_t *fw = arg;
    ucp_worker_h worker       = fw->worker;
    ucp_ep_ext_gen_t *ep_ext, *tmp;

    UCS_ASYNC_BLOCK(&worker->async);
    fw->probe_scheduled = 0;
    ++fw->probe_rounds;
    ucs_list_for_each_safe(ep_ext, tmp, &worker->all_eps, ep_list) {
        ucp_failover_probe_ep(ucp_ep_from_ext_gen(ep_ext));
    }
    UCS_ASYNC_UNBLOCK(&worker->async);
    return 0;
}

/* Async timer: a probe round is due; it runs from the worker's progress */
static void ucp_failover_probe_timer(int id, ucs_event_set_types_t events,
                                     void *arg)
{
    ucp_failover_worker_t *fw  = arg;
    uct_worker_cb_id_t prog_id = UCS_CALLBACKQ_ID_NULL;

    if (fw->probe_scheduled || (fw->worker->num_all_eps == 0)) {
        return;
    }

    fw->probe_scheduled = 1;
    uct_worker_progress_register_safe(fw->worker->uct,
                                      ucp_failover_probe_progress, fw,
                                      UCS_CALLBACKQ_FLAG_ONESHOT, &prog_id);
}

ucs_status_t ucp_failover_probe_start(ucp_failover_worker_t *fw)
{
    ucp_worker_h worker = fw->worker;
    double interval     = worker->context->config.ext.multirail.probe_interval;

    return ucs_async_add_timer(worker->async.mode, ucs_time_from_sec(interval),
                               ucp_failover_probe_timer, fw, &worker->async,
                               &fw->probe_timer_id);
}

static int ucp_failover_probe_cb_filter(const ucs_callbackq_elem_t *elem,
                                        void *arg)
{
    return (elem->cb == ucp_failover_probe_progress) && (elem->arg == arg);
}

void ucp_failover_probe_stop(ucp_failover_worker_t *fw)
{
    if (fw->probe_timer_id >= 0) {
        ucs_async_remove_handler(fw->probe_timer_id, 1);
        fw->probe_timer_id = -1;
    }

    ucs_callbackq_remove_if(&fw->worker->uct->progress_q,
                            ucp_failover_probe_cb_filter, fw);
}
