-- Operator state per resource: the remediation lock becomes one row of every operator-set signal
-- (maintenance window, intentionally offline, never auto-remediate, criticality, note), read in
-- one query by the finding store (suppression) and the action broker (the lock on every
-- dispatch). The table keeps its rows, row-level security policy and grants; DELETE is granted
-- so an operator can clear a resource's state.

ALTER TABLE resource_remediation_locks RENAME TO resource_operator_state;
ALTER TABLE resource_operator_state
    ADD COLUMN intentionally_offline boolean NOT NULL DEFAULT false,
    ADD COLUMN maintenance_starts_at timestamptz,
    ADD COLUMN maintenance_ends_at   timestamptz,
    ADD COLUMN criticality text
        CHECK (criticality IS NULL OR criticality IN ('low', 'medium', 'high', 'critical')),
    ADD COLUMN note text NOT NULL DEFAULT '' CHECK (length(note) <= 2000),
    -- A start needs an end, and the end comes after the start.
    ADD CONSTRAINT resource_operator_state_window
        CHECK ((maintenance_starts_at IS NULL OR maintenance_ends_at IS NOT NULL)
               AND (maintenance_starts_at IS NULL
                    OR maintenance_ends_at > maintenance_starts_at));
GRANT DELETE ON resource_operator_state TO pulse_app;
