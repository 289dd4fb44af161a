/**
 * Copyright (C) 2026 the UCX multi-rail failover authors.
 *
 * See file LICENSE for terms.
 */

#ifndef TEST_RC_AM_COUNT_H_
#define TEST_RC_AM_COUNT_H_

#include "test_rc.h"

/* An RC test whose receiver counts the active messages (id 0) it gets */
class test_rc_am_count : public test_rc {
public:
    virtual void init()
    {
        m_received = 0;
        test_rc::init();
        uct_iface_set_am_handler(m_e2->iface(), 0, am_count_handler,
                                 &m_received, 0);
    }

    static ucs_status_t am_count_handler(void *arg, void *data, size_t length,
                                         unsigned flags)
    {
        ++*static_cast<size_t*>(arg);
        return UCS_OK;
    }

protected:
    size_t m_received;
};

#endif
