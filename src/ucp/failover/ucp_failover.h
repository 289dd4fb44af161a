/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCP_FAILOVER_H_
#define UCP_FAILOVER_H_

#include <ucs/config/parser.h>
#include <ucs/type/status.h>


/**
 * Multi-rail failover configuration, read from the UCX_MULTIRAIL_* environment
 * variables through UCP's own configuration table.
 */
typedef struct ucp_multirail_config {
    /** UCX_MULTIRAIL_FAILOVER: a failed lane fails over to surviving lanes */
    int           enable;
    /** UCX_MULTIRAIL_PROBE_INTERVAL: idle-lane liveness probe interval */
    double        probe_interval;
    /** UCX_MULTIRAIL_PROBE_TIMEOUT: unanswered work/probes fail the lane */
    double        probe_timeout;
    /** UCX_MULTIRAIL_REPROBE_INTERVAL: first re-probe delay of a failed lane */
    double        reprobe_interval;
    /** UCX_MULTIRAIL_REPROBE_MAX_INTERVAL: cap of the re-probe backoff */
    double        reprobe_max_interval;
    /** UCX_MULTIRAIL_REPROBE_MAX_ATTEMPTS: re-probes per failure, or inf */
    unsigned long reprobe_max_attempts;
} ucp_multirail_config_t;


/**
 * The UCX_MULTIRAIL_* fields, embedded (with no prefix of its own) in UCP's
 * configuration table.
 */
extern ucs_config_field_t ucp_multirail_config_table[];


/**
 * Check the values of the multi-rail configuration against each other.
 * Logs a clear error naming the offending variables.
 *
 * @param [in] config  Parsed configuration.
 *
 * @return UCS_OK, or UCS_ERR_INVALID_PARAM if the values are inconsistent.
 */
ucs_status_t ucp_multirail_config_check(const ucp_multirail_config_t *config);

#endif
