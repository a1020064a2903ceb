-- A Proxmox VE cluster's Ceph that is not HEALTH_OK (`ceph_degraded`). The rule names are the
-- wire names of `pulse_domain::alert_rules::AlertRule`.

ALTER TABLE alerts DROP CONSTRAINT alerts_rule_check;
ALTER TABLE alerts ADD CONSTRAINT alerts_rule_check CHECK (rule IN (
    'unhealthy', 'unexpected_exit', 'restart_loop', 'filesystem_usage', 'memory_usage',
    'agent_offline', 'guest_stopped', 'guest_locked', 'node_offline', 'quorum_lost',
    'pool_degraded', 'smart_failure', 'disk_wearout', 'backup_failed', 'backup_stale',
    'pbs_job_failed', 'backup_verify_failed', 'ceph_degraded'));
