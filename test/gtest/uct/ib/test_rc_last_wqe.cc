/**
 * Copyright (C) 2026 the UCX multi-rail failover authors.
 *
 * See file LICENSE for terms.
 */

#include "test_rc_am_count.h"

extern "C" {
#include <ucs/datastruct/list.h>
}

/*
 * A destroyed RC endpoint's QP waits for the device's LAST_WQE_REACHED event
 * at most RC_LAST_WQE_TIMEOUT: when the next QP of the interface is destroyed,
 * the overdue ones are destroyed anyway. On a device that never reports the
 * event (soft-RoCE), the cleanup list stayed as long as the number of
 * endpoints ever destroyed, until the interface went. (On a device that
 * reports it, the list drains either way: these cases test the bound on
 * soft-RoCE, where the project's test command runs them.)
 */
class test_rc_last_wqe : public test_rc_am_count {
public:
    void init()
    {
        modify_config("RC_LAST_WQE_TIMEOUT", m_timeout);
        test_rc_am_count::init();
    }

    size_t cleanups_pending(entity *e)
    {
        return ucs_list_length(&rc_iface(e)->qp_gc_list);
    }

    /* connect a new pair of endpoints (index idx), use it, destroy it */
    void churn(unsigned idx)
    {
        size_t expected = m_received + 1;

        m_e1->connect(idx, *m_e2, idx);
        m_e2->connect(idx, *m_e1, idx);
        ucs_status_t status;
        do {
            status = send_am_message(m_e1, 0, idx);
            progress();
        } while (status == UCS_ERR_NO_RESOURCE);
        ASSERT_UCS_OK(status);
        wait_for_value(&m_received, expected, true);
        ASSERT_EQ(expected, m_received);

        m_e1->destroy_ep(idx);
        m_e2->destroy_ep(idx);
        short_progress_loop();
    }

protected:
    const char *m_timeout = "0";
};

UCS_TEST_P(test_rc_last_wqe, overdue_qps_are_destroyed)
{
    for (unsigned idx = 1; idx <= 8; ++idx) {
        churn(idx);
        /* at most the QP destroyed last still waits for its event */
        EXPECT_LE(cleanups_pending(m_e1), 1u) << "after endpoint " << idx;
        EXPECT_LE(cleanups_pending(m_e2), 1u) << "after endpoint " << idx;
    }
}

UCT_INSTANTIATE_RC_TEST_CASE(test_rc_last_wqe)


/* With an infinite timeout nothing is destroyed before its event: on a device
 * that reports it, the list drains; on one that does not, it holds every
 * destroyed QP (the behaviour before the setting existed) */
class test_rc_last_wqe_inf : public test_rc_last_wqe {
public:
    test_rc_last_wqe_inf()
    {
        m_timeout = "inf";
    }
};

UCS_TEST_P(test_rc_last_wqe_inf, waits_for_the_event)
{
    for (unsigned idx = 1; idx <= 4; ++idx) {
        churn(idx);
    }

    /* a device that reports the event does so in time (the wait ends as soon
     * as the list is empty; rxe never reports it) */
    ucs_time_t deadline = ucs::get_deadline(10.0);
    while ((cleanups_pending(m_e1) != 0) && (ucs_get_time() < deadline)) {
        progress();
    }

    size_t pending = cleanups_pending(m_e1);
    EXPECT_TRUE((pending == 0) || (pending == 4)) << "pending " << pending;
}

UCT_INSTANTIATE_RC_TEST_CASE(test_rc_last_wqe_inf)
