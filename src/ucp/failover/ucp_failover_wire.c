/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * Peer agreement: the side that detects a lane failure tells the other side
 * with a LANE_DOWN message on a surviving lane (active message id
 * UCP_AM_ID_FAILOVER), and the other side fails over the same lane. The same
 * message id carries the recovery handshake (ucp_failover_recover.c). Failover
 * messages are only ever sent to a peer that advertised failover at wireup.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucp_failover_int.h"

#include <ucp/core/ucp_ep.h>
#include <ucp/core/ucp_ep.inl>
#include <ucp/core/ucp_request.h>
#include <ucp/core/ucp_request.inl>
#include <ucp/core/ucp_worker.h>
#include <ucp/core/ucp_worker.inl>
#include <ucs/debug/log.h>


/* A failover message handled on the progress thread */
typedef struct {
    ucp_worker_h       worker;
    uint64_t           ep_id;
    ucp_failover_msg_t msg;
    uint8_t            addr[]; /* msg.addr_len bytes */
} ucp_failover_msg_work_t;


static uint16_t ucp_failover_lane_tl_csum(ucp_ep_h ep, ucp_lane_index_t lane)
{
    ucp_rsc_index_t rsc_index = ucp_ep_get_rsc_index(ep, lane);

    return (rsc_index == UCP_NULL_RESOURCE) ? 0 :
           ep->worker->context->tl_rscs[rsc_index].tl_name_csum;
}

uint64_t ucp_failover_msg_header(ucp_ep_h ep)
{
    return (ep->flags & UCP_EP_FLAG_REMOTE_ID) ? ucp_ep_remote_id(ep) :
                                                 UCS_PTR_MAP_KEY_INVALID;
}

void ucp_failover_msg_init(ucp_ep_h ep, ucp_lane_index_t lane, uint8_t type,
                           uint32_t token, ucp_failover_msg_t *msg)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);

    msg->type          = type;
    msg->sender_lane   = lane;
    msg->receiver_lane = (fo->peer_lane_valid & UCS_BIT(lane)) ?
                         fo->peer_lane[lane] : UCP_NULL_LANE;
    msg->num_lanes     = ucp_ep_num_lanes(ep);
    msg->tl_name_csum  = ucp_failover_lane_tl_csum(ep, lane);
    msg->conn_sn       = ep->conn_sn;
    msg->sender_uuid   = ep->worker->uuid;
    msg->token         = token;
    msg->lane_sn       = 0;
    msg->addr_len      = 0;
}

typedef struct {
    uint64_t                 header;
    const ucp_failover_msg_t *msg;
} ucp_failover_msg_pack_arg_t;


static size_t ucp_failover_msg_pack(void *dest, void *arg)
{
    const ucp_failover_msg_pack_arg_t *pack = arg;
    size_t length = sizeof(*pack->msg) + pack->msg->addr_len;

    *(uint64_t*)dest = pack->header;
    memcpy(UCS_PTR_BYTE_OFFSET(dest, sizeof(uint64_t)), pack->msg, length);
    return sizeof(uint64_t) + length;
}

/*
 * Send @a msg (and the address after it) on @a lane's transport endpoint
 * @a uct_ep: as a short active message when it fits the transport's short
 * limit, else as bcopy (RDMA transports' short limit is their inline size,
 * which an address may exceed). The receiver sees the same bytes.
 */
ucs_status_t ucp_failover_msg_send(ucp_ep_h ep, ucp_lane_index_t lane,
                                   uct_ep_h uct_ep,
                                   const ucp_failover_msg_t *msg)
{
    size_t length = sizeof(*msg) + msg->addr_len;
    ucp_failover_msg_pack_arg_t pack;
    const uct_iface_attr_t *attr;
    ssize_t packed;

    attr = ucp_worker_iface_get_attr(ep->worker,
                                     ucp_ep_get_rsc_index(ep, lane));
    if ((attr->cap.flags & UCT_IFACE_FLAG_AM_SHORT) &&
        ((sizeof(uint64_t) + length) <= attr->cap.am.max_short)) {
        return uct_ep_am_short(uct_ep, UCP_AM_ID_FAILOVER,
                               ucp_failover_msg_header(ep), msg, length);
    }

    if (!(attr->cap.flags & UCT_IFACE_FLAG_AM_BCOPY) ||
        ((sizeof(uint64_t) + length) > attr->cap.am.max_bcopy)) {
        return UCS_ERR_UNSUPPORTED;
    }

    pack.header = ucp_failover_msg_header(ep);
    pack.msg    = msg;
    packed      = uct_ep_am_bcopy(uct_ep, UCP_AM_ID_FAILOVER,
                                  ucp_failover_msg_pack, &pack, 0);
    return (packed < 0) ? (ucs_status_t)packed : UCS_OK;
}

ucs_status_t ucp_failover_msg_progress(uct_pending_req_t *self)
{
    ucp_request_t *req = ucs_container_of(self, ucp_request_t, send.uct);
    ucp_ep_h ep        = req->send.ep;
    ucp_failover_msg_t *msg;
    ucs_status_t status;

    req->send.lane = ucp_ep_get_am_lane(ep);
    msg            = req->send.buffer;
    status         = ucp_failover_msg_send(ep, req->send.lane,
                                           ucp_ep_get_am_uct_ep(ep), msg);
    if (status == UCS_ERR_NO_RESOURCE) {
        return UCS_ERR_NO_RESOURCE;
    }

    if (status != UCS_OK) {
        /* the peer finds out from its own side of the lane */
        ucs_diag("ep %p: failed to send failover message %d (lane %d): %s",
                 ep, msg->type, msg->sender_lane, ucs_status_string(status));
    }

    ucs_free(msg);
    ucp_request_put(req);
    return UCS_OK;
}

/*
 * Messages about a lane that go on the am lane are numbered per lane. They
 * may reach the peer out of order: one the transport had no room for waits
 * in the am lane's pending queue while a later one goes at once.
 */
static uint16_t ucp_failover_lane_sn_next(ucp_ep_h ep, ucp_lane_index_t lane)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);

    if (++fo->tx_lane_sn[lane] == 0) {
        fo->tx_lane_sn[lane] = 1; /* 0: not numbered */
    }

    return fo->tx_lane_sn[lane];
}

/* Whether the peer's message numbered @a lane_sn about @a lane is older than
 * one already handled, or superseded */
static int ucp_failover_lane_sn_is_old(ucp_ep_h ep, ucp_lane_index_t lane,
                                       uint16_t lane_sn)
{
    uint16_t last = ucp_failover_ep(ep)->rx_lane_sn[lane];

    return (last != 0) && ((int16_t)(lane_sn - last) <= 0);
}

/* Whether a numbered message is older than one already handled: the later
 * one says what the sender does now (a CONNECT overtaken by the CONNECT_ACK
 * that abandoned its attempt, a LANE_DOWN overtaken by the lane's recovery).
 * The recovery messages sent over the rail are not numbered: their
 * lane_sn is the sender's last number (ucp_failover_wire_superseded()). */
static int ucp_failover_msg_is_stale(ucp_ep_h ep, ucp_lane_index_t lane,
                                     const ucp_failover_msg_t *msg)
{
    if ((msg->lane_sn == 0) || (msg->type == UCP_FAILOVER_MSG_LANE_UP_REQ) ||
        (msg->type == UCP_FAILOVER_MSG_LANE_UP_ACK)) {
        return 0;
    }

    if (ucp_failover_lane_sn_is_old(ep, lane, msg->lane_sn)) {
        return 1;
    }

    ucp_failover_ep(ep)->rx_lane_sn[lane] = msg->lane_sn;
    return 0;
}

void ucp_failover_wire_superseded(ucp_ep_h ep, ucp_lane_index_t lane,
                                  uint16_t lane_sn)
{
    if ((lane_sn != 0) && !ucp_failover_lane_sn_is_old(ep, lane, lane_sn)) {
        ucp_failover_ep(ep)->rx_lane_sn[lane] = lane_sn;
    }
}

void ucp_failover_wire_send(ucp_ep_h ep, ucp_lane_index_t lane, uint8_t type,
                            uint32_t token, const void *addr, size_t addr_len)
{
    ucp_failover_msg_t *msg;
    ucp_request_t *req;

    ucs_assert(addr_len <= UCP_FAILOVER_MSG_ADDR_MAX);
    msg = ucs_malloc(sizeof(*msg) + addr_len, "failover_msg");
    req = ucp_request_get(ep->worker);
    if ((msg == NULL) || (req == NULL)) {
        ucs_error("ep %p: no memory to send failover message %d (lane %d)",
                  ep, type, lane);
        ucs_free(msg);
        if (req != NULL) {
            ucp_request_put(req);
        }
        return;
    }

    ucp_failover_msg_init(ep, lane, type, token, msg);
    msg->addr_len = addr_len;
    if ((lane < UCP_MAX_LANES) && (type != UCP_FAILOVER_MSG_CLOSING)) {
        msg->lane_sn = ucp_failover_lane_sn_next(ep, lane);
    }
    memcpy(msg + 1, addr, addr_len);
    req->flags                    = 0;
    req->send.ep                  = ep;
    req->send.buffer              = msg;
    req->send.uct.func            = ucp_failover_msg_progress;
    req->send.pending_lane        = UCP_NULL_LANE;
    req->send.state.uct_comp.func = NULL;
    ucs_debug("ep %p: sending failover message %d (lane %d, peer lane %d)",
              ep, type, lane, msg->receiver_lane);
    ucp_request_send(req);
}

int ucp_failover_request_ff(ucp_request_t *req)
{
    if (req->send.uct.func != ucp_failover_msg_progress) {
        return 0;
    }

    /* the endpoint failed with the message still queued: drop it */
    ucs_free(req->send.buffer);
    ucp_request_put(req);
    return 1;
}

void ucp_failover_wire_lane_down(ucp_ep_h ep, ucp_lane_index_t lane)
{
    ucp_failover_wire_send(ep, lane, UCP_FAILOVER_MSG_LANE_DOWN, 0, NULL, 0);
}

void ucp_failover_wire_lane_down_again(ucp_ep_h ep, ucp_lane_map_t lanes)
{
    ucp_lane_index_t lane;

    /* LANE_DOWN is not sequenced: one sent on the am lane that just failed
     * may have been lost with it. Say it again on the new am lane for every
     * lane this side holds failed, unless an attempt to bring it back is
     * under way (the peer's lane may be coming back with it); a peer that
     * failed the lane already ignores it. */
    ucs_for_each_bit(lane, lanes) {
        if (!ucp_failover_recover_in_flight(ep, lane)) {
            ucs_debug("ep %p: LANE_DOWN for lane[%d] again on the new am "
                      "lane", ep, lane);
            ucp_failover_wire_lane_down(ep, lane);
        }
    }
}

/*
 * Which of our lanes the peer means: its index in our numbering if the peer
 * knows it, else the inverse of the lane map wireup computed on our side.
 * Lanes connected to the peer's interface (not to a peer endpoint) have no
 * such map on either side; then assume the peers number their lanes alike
 * (they select lanes from resources listed in the same, name, order), and
 * accept it only if the lane counts and the transport names agree.
 */
static ucp_lane_index_t
ucp_failover_msg_lane(ucp_ep_h ep, const ucp_failover_msg_t *msg)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    ucp_lane_index_t lane;

    if (msg->receiver_lane != UCP_NULL_LANE) {
        return (msg->receiver_lane < ucp_ep_num_lanes(ep)) ?
               msg->receiver_lane : UCP_NULL_LANE;
    }

    for (lane = 0; lane < ucp_ep_num_lanes(ep); ++lane) {
        if ((fo->peer_lane_valid & UCS_BIT(lane)) &&
            (fo->peer_lane[lane] == msg->sender_lane)) {
            return lane;
        }
    }

    lane = msg->sender_lane;
    if ((lane < ucp_ep_num_lanes(ep)) &&
        !(fo->peer_lane_valid & UCS_BIT(lane)) &&
        (msg->num_lanes == ucp_ep_num_lanes(ep)) &&
        (msg->tl_name_csum == ucp_failover_lane_tl_csum(ep, lane))) {
        return lane;
    }

    return UCP_NULL_LANE;
}

/* The endpoint a LANE_DOWN is for, by id or else by (peer UUID, conn_sn) */
static ucp_ep_h ucp_failover_msg_ep(ucp_worker_h worker, uint64_t ep_id,
                                    const ucp_failover_msg_t *msg)
{
    ucp_failover_worker_t *fw = worker->failover;
    ucp_ep_ext_gen_t *ep_ext;
    ucp_failover_ep_t *fo;
    ucp_ep_h ep;

    if (ep_id != UCS_PTR_MAP_KEY_INVALID) {
        return (ucp_worker_get_ep_by_id(worker, ep_id, &ep) == UCS_OK) ?
               ep : NULL;
    }

    if (fw != NULL) {
        /* the endpoints that negotiated failover */
        ucs_list_for_each(fo, &fw->eps, list) {
            if ((fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) &&
                (fo->peer_uuid == msg->sender_uuid) &&
                (fo->ep->conn_sn == msg->conn_sn)) {
                return fo->ep;
            }
        }
        return NULL;
    }

    /* no rail monitor (it could not be allocated): every endpoint */
    ucs_list_for_each(ep_ext, &worker->all_eps, ep_list) {
        ep = ucp_ep_from_ext_gen(ep_ext);
        if ((ucp_failover_ep(ep)->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) &&
            (ucp_failover_ep(ep)->peer_uuid == msg->sender_uuid) &&
            (ep->conn_sn == msg->conn_sn)) {
            return ep;
        }
    }

    return NULL;
}

static unsigned ucp_failover_msg_handle(void *arg)
{
    ucp_failover_msg_work_t *work = arg;
    ucp_worker_h worker           = work->worker;
    ucp_lane_index_t lane;
    ucp_ep_h ep;

    UCS_ASYNC_BLOCK(&worker->async);
    ep = ucp_failover_msg_ep(worker, work->ep_id, &work->msg);
    if (ep == NULL) {
        ucs_diag("worker %p: failover message %d for an unknown endpoint",
                 worker, work->msg.type);
        goto out;
    }

    if (ep->flags & UCP_EP_FLAG_FAILED) {
        goto out;
    }

    if (work->msg.type == UCP_FAILOVER_MSG_CLOSING) {
        ucp_failover_cm_peer_closing(ep);
        goto out;
    }

    lane = ucp_failover_msg_lane(ep, &work->msg);
    if (lane == UCP_NULL_LANE) {
        ucs_diag("ep %p: failover message %d for peer lane %d names no lane "
                 "of ours", ep, work->msg.type, work->msg.sender_lane);
    } else if (ucp_failover_msg_is_stale(ep, lane, &work->msg)) {
        /* rare (a message that waited behind data while the lane's state
         * moved on): a diagnostic, so that a late report shows */
        ucs_diag("ep %p: failover message %d for lane[%d] overtaken (number "
                 "%u, %u handled or superseded), ignored", ep,
                 work->msg.type, lane, work->msg.lane_sn,
                 ucp_failover_ep(ep)->rx_lane_sn[lane]);
    } else if (work->msg.type != UCP_FAILOVER_MSG_LANE_DOWN) {
        ucp_failover_recover_msg(ep, lane, &work->msg, work->addr);
    } else if (ucp_failover_lane_is_failed(ep, lane)) {
        ucs_debug("ep %p: LANE_DOWN for lane[%d], which already failed", ep,
                  lane);
    } else if (ucp_failover_lane_can_fail(ep, lane)) {
        ucp_failover_lane_down(ep, lane, "peer reported", UCS_OK, 0);
    } else {
        ucs_diag("ep %p: LANE_DOWN for lane[%d], which cannot fail over",
                 ep, lane);
    }

out:
    UCS_ASYNC_UNBLOCK(&worker->async);
    ucs_free(work);
    return 1;
}

static ucs_status_t
ucp_failover_msg_handler(void *arg, void *data, size_t length, unsigned flags)
{
    ucp_worker_h worker        = arg;
    uct_worker_cb_id_t prog_id = UCS_CALLBACKQ_ID_NULL;
    ucp_failover_msg_work_t *work;
    ucp_failover_msg_t msg;

    if (length < (sizeof(uint64_t) + sizeof(msg))) {
        ucs_diag("worker %p: ignoring failover message of %zu bytes", worker,
                 length);
        return UCS_OK;
    }

    memcpy(&msg, UCS_PTR_BYTE_OFFSET(data, sizeof(uint64_t)), sizeof(msg));
    if ((msg.type < UCP_FAILOVER_MSG_LANE_DOWN) ||
        (msg.type > UCP_FAILOVER_MSG_CLOSING) ||
        (length != (sizeof(uint64_t) + sizeof(msg) + msg.addr_len))) {
        ucs_diag("worker %p: ignoring failover message of type %d, %zu bytes",
                 worker, msg.type, length);
        return UCS_OK;
    }

    work = ucs_malloc(sizeof(*work) + msg.addr_len, "failover_msg_work");
    if (work == NULL) {
        ucs_error("worker %p: no memory for a failover message", worker);
        return UCS_OK;
    }

    work->worker = worker;
    work->msg    = msg;
    memcpy(&work->ep_id, data, sizeof(work->ep_id));
    memcpy(work->addr,
           UCS_PTR_BYTE_OFFSET(data, sizeof(uint64_t) + sizeof(msg)),
           msg.addr_len);

    /* the lane switch runs on the progress thread, outside UCT callbacks */
    uct_worker_progress_register_safe(worker->uct, ucp_failover_msg_handle,
                                      work, UCS_CALLBACKQ_FLAG_ONESHOT,
                                      &prog_id);
    ucp_worker_signal_internal(worker);
    return UCS_OK;
}

static void ucp_failover_msg_dump(ucp_worker_h worker, uct_am_trace_type_t type,
                                  uint8_t id, const void *data, size_t length,
                                  char *buffer, size_t max)
{
    const ucp_failover_msg_t *msg = UCS_PTR_BYTE_OFFSET(data,
                                                        sizeof(uint64_t));

    snprintf(buffer, max, "FAILOVER type %d sender_lane %d receiver_lane %d "
             "token %u lane_sn %u", msg->type, msg->sender_lane,
             msg->receiver_lane, msg->token, msg->lane_sn);
}

UCP_DEFINE_AM(UINT64_MAX, UCP_AM_ID_FAILOVER, ucp_failover_msg_handler,
              ucp_failover_msg_dump, UCT_CB_FLAG_ASYNC);
