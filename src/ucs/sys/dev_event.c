/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "dev_event.h"

#include <ucs/datastruct/list.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>

#include <pthread.h>


typedef struct {
    ucs_list_link_t    list;
    ucs_dev_event_cb_t cb;
    void               *arg;
} ucs_dev_event_listener_t;


/* Listeners; the lock is held while they are called, so that unsubscribe
 * returns only once no call to the listener is running */
static UCS_LIST_HEAD(ucs_dev_event_listeners);
static pthread_mutex_t ucs_dev_event_lock = PTHREAD_MUTEX_INITIALIZER;


ucs_status_t ucs_dev_event_subscribe(ucs_dev_event_cb_t cb, void *arg)
{
    ucs_dev_event_listener_t *listener;

    listener = ucs_malloc(sizeof(*listener), "dev event listener");
    if (listener == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    listener->cb  = cb;
    listener->arg = arg;
    pthread_mutex_lock(&ucs_dev_event_lock);
    ucs_list_add_tail(&ucs_dev_event_listeners, &listener->list);
    pthread_mutex_unlock(&ucs_dev_event_lock);
    return UCS_OK;
}

void ucs_dev_event_unsubscribe(ucs_dev_event_cb_t cb, void *arg)
{
    ucs_dev_event_listener_t *listener, *tmp;

    pthread_mutex_lock(&ucs_dev_event_lock);
    ucs_list_for_each_safe(listener, tmp, &ucs_dev_event_listeners, list) {
        if ((listener->cb == cb) && (listener->arg == arg)) {
            ucs_list_del(&listener->list);
            ucs_free(listener);
            break;
        }
    }
    pthread_mutex_unlock(&ucs_dev_event_lock);
}

void ucs_dev_event_notify(const char *dev_name, ucs_dev_event_t event)
{
    ucs_dev_event_listener_t *listener;

    ucs_debug("device event: %s on %s", ucs_dev_event_str(event), dev_name);
    pthread_mutex_lock(&ucs_dev_event_lock);
    ucs_list_for_each(listener, &ucs_dev_event_listeners, list) {
        listener->cb(listener->arg, dev_name, event);
    }
    pthread_mutex_unlock(&ucs_dev_event_lock);
}

const char *ucs_dev_event_str(ucs_dev_event_t event)
{
    switch (event) {
    case UCS_DEV_EVENT_PORT_ERR:
        return "port error";
    case UCS_DEV_EVENT_PORT_ACTIVE:
        return "port active";
    default:
        return "unknown device event";
    }
}
