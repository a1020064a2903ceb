-- The alert rules of Proxmox Backup Server datastores: a garbage collection, verify, prune or
-- sync job whose last run failed (`pbs_job_failed`), and a backup group whose latest snapshot
-- failed verification (`backup_verify_failed`). The rule names are the wire names of
-- `pulse_domain::alert_rules::AlertRule`.

ALTER TABLE alerts DROP CONSTRAINT alerts_rule_check;
ALTER TABLE alerts ADD CONSTRAINT alerts_rule_check CHECK (rule IN (
    'unhealthy', 'unexpected_exit', 'restart_loop', 'filesystem_usage', 'memory_usage',
    'agent_offline', 'guest_stopped', 'guest_locked', 'node_offline', 'quorum_lost',
    'pool_degraded', 'smart_failure', 'disk_wearout', 'backup_failed', 'backup_stale',
    'pbs_job_failed', 'backup_verify_failed'));
