/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCS_DEV_EVENT_H_
#define UCS_DEV_EVENT_H_

#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

BEGIN_C_DECLS

/**
 * Device events: a transport that learns that one of its devices or ports
 * changed state (e.g. an InfiniBand port error) posts it here, and whoever
 * subscribed (UCP's multi-rail failover) hears of it, without the transport
 * knowing about its listeners.
 */
typedef enum {
    UCS_DEV_EVENT_PORT_ERR,    /* the port went down */
    UCS_DEV_EVENT_PORT_ACTIVE  /* the port is up again */
} ucs_dev_event_t;


/**
 * A listener. Called in the context of the poster (any thread, e.g. an
 * async thread), so it must be short and must not block; it must not
 * subscribe or unsubscribe.
 *
 * @param [in] arg       The listener's argument.
 * @param [in] dev_name  Device name as the transport lists it ("mlx5_0:1").
 * @param [in] event     What happened.
 */
typedef void (*ucs_dev_event_cb_t)(void *arg, const char *dev_name,
                                   ucs_dev_event_t event);


/** Listen to device events; a pair (cb, arg) is one listener */
ucs_status_t ucs_dev_event_subscribe(ucs_dev_event_cb_t cb, void *arg);


/** Stop listening; no call to (cb, arg) is running when it returns */
void ucs_dev_event_unsubscribe(ucs_dev_event_cb_t cb, void *arg);


/** Post a device event to every listener */
void ucs_dev_event_notify(const char *dev_name, ucs_dev_event_t event);


/** Name of a device event, for logs */
const char *ucs_dev_event_str(ucs_dev_event_t event);

END_C_DECLS

#endif
