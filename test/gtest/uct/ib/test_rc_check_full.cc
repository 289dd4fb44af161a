/**
 * Copyright (C) 2026 the UCX multi-rail failover authors.
 *
 * See file LICENSE for terms.
 */

#include "test_rc_am_count.h"

extern "C" {
#include <uct/ib/rc/verbs/rc_verbs.h>
}

/*
 * A keepalive check of an rc_verbs endpoint whose TX credits are used up
 * posts into the one send WQE the QP has beyond them (patch 0060): its post
 * restarts a soft-RoCE requester that stopped with the queue full. Before,
 * the check returned without posting, and such a QP stayed stopped.
 */
class test_rc_check_full : public test_rc_am_count {
public:
    int16_t credits()
    {
        return uct_rc_txqp_available(&rc_ep(m_e1)->txqp);
    }

    int16_t max_credits()
    {
        uct_rc_verbs_iface_t *iface = ucs_derived_of(m_e1->iface(),
                                                     uct_rc_verbs_iface_t);
        return iface->config.tx_max_wr;
    }
};

UCS_TEST_P(test_rc_check_full, uses_the_reserved_wqe)
{
    /* fill the send queue without progress: nothing completes */
    size_t sent = 0;
    ucs_status_t status;
    for (;;) {
        status = send_am_message(m_e1, 0, 0);
        if (status != UCS_OK) {
            break;
        }
        ++sent;
        ASSERT_LE(sent, 100000u);
    }
    ASSERT_EQ(UCS_ERR_NO_RESOURCE, status);
    ASSERT_EQ(0, credits()) << "sent " << sent;
    EXPECT_EQ((size_t)max_credits(), sent);

    /* the check goes into the reserved WQE, once */
    ASSERT_UCS_OK(uct_ep_check(m_e1->ep(0), 0, NULL));
    EXPECT_EQ(-1, credits());
    ASSERT_UCS_OK(uct_ep_check(m_e1->ep(0), 0, NULL));
    EXPECT_EQ(-1, credits());
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, send_am_message(m_e1, 0, 0));

    /* everything completes, the credits come back whole, nothing lost */
    flush();
    EXPECT_EQ(max_credits(), credits());
    wait_for_value(&m_received, sent, true);
    EXPECT_EQ(sent, m_received);

    /* with credits, a check is the usual one */
    ASSERT_UCS_OK(uct_ep_check(m_e1->ep(0), 0, NULL));
    flush();
    EXPECT_EQ(max_credits(), credits());
}

_UCT_INSTANTIATE_TEST_CASE(test_rc_check_full, rc_verbs)
