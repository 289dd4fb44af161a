/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * Link watcher ("who notices a path died", carrier side): an rtnetlink
 * socket subscribed to link notifications, read in UCX's async context.
 * Every change of a network device's administrative state, carrier, or its
 * removal is reported to a callback, with the device's name. It knows
 * nothing of lanes or endpoints; the worker monitor maps devices to lanes.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucp_failover_int.h"

#include <ucs/async/async.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/sock.h>
#include <ucs/sys/string.h>

#include <errno.h>
#include <net/if.h>
#include <sys/ioctl.h>

#if HAVE_LIBNL
#  include <netlink/netlink.h>
#  include <netlink/msg.h>
#  include <netlink/route/link.h>
#  include <linux/rtnetlink.h>
#endif


/* Reads per readiness event, so that a storm of notifications cannot keep
 * the async thread in the handler; what is left is treated as lost */
#define UCP_FAILOVER_LINK_MAX_READS 1024


struct ucp_failover_link_watch {
#if HAVE_LIBNL
    struct nl_sock         *sk;       /* rtnetlink socket, RTNLGRP_LINK */
    struct nl_cb           *nl_cb;    /* its callbacks (a reference) */
#endif
    int                    fd;        /* its descriptor, in the async set */
    ucp_failover_link_cb_t cb;        /* where events go */
    void                   *arg;
};


const char *ucp_failover_link_event_str(ucp_failover_link_event_t event)
{
    switch (event) {
    case UCP_FAILOVER_LINK_UP:
        return "link up";
    case UCP_FAILOVER_LINK_ADMIN_DOWN:
        return "link set down";
    case UCP_FAILOVER_LINK_NO_CARRIER:
        return "carrier lost";
    case UCP_FAILOVER_LINK_REMOVED:
        return "device removed";
    case UCP_FAILOVER_LINK_PORT_ERR:
        return "port error";
    case UCP_FAILOVER_LINK_PORT_ACTIVE:
        return "port active";
    case UCP_FAILOVER_LINK_RESYNC:
        return "link events lost";
    default:
        return "unknown link event";
    }
}

ucp_failover_link_event_t ucp_failover_link_flags_event(unsigned flags)
{
    if (!(flags & IFF_UP)) {
        return UCP_FAILOVER_LINK_ADMIN_DOWN;
    } else if (!(flags & IFF_RUNNING)) {
        return UCP_FAILOVER_LINK_NO_CARRIER;
    }

    return UCP_FAILOVER_LINK_UP;
}

ucp_failover_link_event_t ucp_failover_link_query(const char *ifname)
{
    struct ifreq ifr;

    if (if_nametoindex(ifname) == 0) {
        /* only a device that is gone counts, not e.g. a lack of fds */
        return (errno == ENODEV) ? UCP_FAILOVER_LINK_REMOVED :
                                   UCP_FAILOVER_LINK_NONE;
    }

    if (ucs_netif_ioctl(ifname, SIOCGIFFLAGS, &ifr) != UCS_OK) {
        return UCP_FAILOVER_LINK_NONE;
    }

    return ucp_failover_link_flags_event(ifr.ifr_flags);
}

#if HAVE_LIBNL

static void ucp_failover_link_obj_cb(struct nl_object *obj, void *arg)
{
    ucp_failover_link_watch_t *watch = arg;
    struct rtnl_link *link           = (struct rtnl_link*)obj;
    const char *name                 = rtnl_link_get_name(link);
    ucp_failover_link_event_t event;

    if (name == NULL) {
        return;
    }

    if (nl_object_get_msgtype(obj) == RTM_DELLINK) {
        event = UCP_FAILOVER_LINK_REMOVED;
    } else {
        event = ucp_failover_link_flags_event(rtnl_link_get_flags(link));
    }

    ucs_trace("link watch %p: %s: %s", watch, name,
              ucp_failover_link_event_str(event));
    watch->cb(watch->arg, name, event);
}

static int ucp_failover_link_msg_cb(struct nl_msg *msg, void *arg)
{
    int type = nlmsg_hdr(msg)->nlmsg_type;

    if ((type == RTM_NEWLINK) || (type == RTM_DELLINK)) {
        nl_msg_parse(msg, ucp_failover_link_obj_cb, arg);
    }

    return NL_OK;
}

static void ucp_failover_link_readable(int fd, ucs_event_set_types_t events,
                                       void *arg)
{
    ucp_failover_link_watch_t *watch = arg;
    int i, ret;

    for (i = 0; i < UCP_FAILOVER_LINK_MAX_READS; ++i) {
        /* > 0: messages read; 0 (libnl < 3.2.28 on EAGAIN) or < 0: stop */
        ret = nl_recvmsgs_report(watch->sk, watch->nl_cb);
        if (ret > 0) {
            continue;
        } else if (ret == 0) {
            return;
        }

        if (ret == -NLE_NOMEM) {
            /* The socket overran (ENOBUFS): notifications were lost, so the
             * owner must look at the devices' state itself */
            ucs_diag("link watch %p: rtnetlink overrun, resynchronising",
                     watch);
            watch->cb(watch->arg, NULL, UCP_FAILOVER_LINK_RESYNC);
            continue;
        }

        if ((ret != -NLE_AGAIN) && (ret != -NLE_INTR)) {
            ucs_diag("link watch %p: rtnetlink receive failed: %s", watch,
                     nl_geterror(ret));
        }
        return;
    }

    /* Notifications kept coming: rather than stay here, treat what is left
     * as lost */
    ucs_diag("link watch %p: more than %d reads, resynchronising", watch,
             UCP_FAILOVER_LINK_MAX_READS);
    watch->cb(watch->arg, NULL, UCP_FAILOVER_LINK_RESYNC);
}

ucs_status_t ucp_failover_link_watch_start(ucs_async_context_t *async,
                                           ucp_failover_link_cb_t cb,
                                           void *arg,
                                           ucp_failover_link_watch_t **watch_p)
{
    ucp_failover_link_watch_t *watch;
    ucs_status_t status;
    int ret;

    watch = ucs_calloc(1, sizeof(*watch), "failover link watch");
    if (watch == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    watch->cb  = cb;
    watch->arg = arg;
    watch->sk  = nl_socket_alloc();
    if (watch->sk == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto err_free;
    }

    /* Notifications carry no sequence numbers of ours */
    nl_socket_disable_seq_check(watch->sk);
    nl_socket_modify_cb(watch->sk, NL_CB_VALID, NL_CB_CUSTOM,
                        ucp_failover_link_msg_cb, watch);

    watch->nl_cb = nl_socket_get_cb(watch->sk);

    ret = nl_connect(watch->sk, NETLINK_ROUTE);
    if (ret < 0) {
        ucs_diag("link watch: rtnetlink connect failed: %s", nl_geterror(ret));
        status = UCS_ERR_IO_ERROR;
        goto err_free_sk;
    }

    ret = nl_socket_add_membership(watch->sk, RTNLGRP_LINK);
    if (ret >= 0) {
        ret = nl_socket_set_nonblocking(watch->sk);
    }
    if (ret < 0) {
        ucs_diag("link watch: rtnetlink subscribe failed: %s",
                 nl_geterror(ret));
        status = UCS_ERR_IO_ERROR;
        goto err_free_sk;
    }

    watch->fd = nl_socket_get_fd(watch->sk);
    status    = ucs_async_set_event_handler(async->mode, watch->fd,
                                            UCS_EVENT_SET_EVREAD,
                                            ucp_failover_link_readable, watch,
                                            async);
    if (status != UCS_OK) {
        goto err_free_sk;
    }

    ucs_debug("link watch %p: rtnetlink fd %d", watch, watch->fd);
    *watch_p = watch;
    return UCS_OK;

err_free_sk:
    nl_cb_put(watch->nl_cb);
    nl_socket_free(watch->sk); /* closes the socket too */
err_free:
    ucs_free(watch);
    return status;
}

void ucp_failover_link_watch_stop(ucp_failover_link_watch_t *watch)
{
    ucs_async_remove_handler(watch->fd, 1);
    nl_cb_put(watch->nl_cb);
    nl_socket_free(watch->sk);
    ucs_free(watch);
}

#else /* HAVE_LIBNL */

ucs_status_t ucp_failover_link_watch_start(ucs_async_context_t *async,
                                           ucp_failover_link_cb_t cb,
                                           void *arg,
                                           ucp_failover_link_watch_t **watch_p)
{
    ucs_diag("link watch: built without libnl, link events are not watched");
    return UCS_ERR_UNSUPPORTED;
}

void ucp_failover_link_watch_stop(ucp_failover_link_watch_t *watch)
{
}

#endif /* HAVE_LIBNL */
