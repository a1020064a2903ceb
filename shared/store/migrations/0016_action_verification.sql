-- The action lifecycle after a decision (issue 7): the finding an action is meant to fix, the
-- verifier's judgement of a completed action, and the cross-tenant read the broker's recovery
-- sweep starts from.
--
-- `pulse-store::actions` stays the only writer. A verification is recorded once, on a
-- `completed` action, as a compare-and-swap version bump with its audit row
-- (`action.verification`) in the same transaction; a second one is refused.

ALTER TABLE actions
    ADD COLUMN finding_id text CHECK (finding_id IS NULL OR finding_id ~ '^[0-9a-f]{16}$'),
    ADD COLUMN verification text CHECK (verification IN ('verified', 'still_failing',
                                                          'inconclusive')),
    ADD COLUMN verification_detail jsonb
        CHECK (verification_detail IS NULL OR jsonb_typeof(verification_detail) = 'object'),
    ADD COLUMN verified_at timestamptz,
    ADD CONSTRAINT actions_verification_only_when_completed
        CHECK (verification IS NULL OR state = 'completed'),
    ADD CONSTRAINT actions_verification_complete
        CHECK ((verification IS NULL) = (verified_at IS NULL));

-- What the recovery sweep looks at: actions that are not done yet.
CREATE INDEX actions_unfinished ON actions (tenant_id, updated_at)
    WHERE state IN ('planned', 'pending_approval', 'approved', 'executing')
       OR (state = 'completed' AND verification IS NULL);

-- Actions of every tenant the broker still has to move on (expire a plan that ran out, execute
-- an approved one, learn the receipt of an executing one, verify a completed one), oldest change first, at most `max_rows`. Each one is then handled in its own
-- tenant's transaction.
CREATE FUNCTION pulse_unfinished_actions(max_rows integer)
RETURNS TABLE (tenant_id text, action_id uuid, state text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT a.tenant_id, a.id, a.state
    FROM public.actions a
    WHERE (a.state IN ('planned', 'pending_approval') AND a.expires_at <= now())
       OR a.state IN ('approved', 'executing')
       OR (a.state = 'completed' AND a.verification IS NULL)
    ORDER BY a.updated_at, a.id
    LIMIT least(greatest(max_rows, 1), 100000)
$$;
REVOKE ALL ON FUNCTION pulse_unfinished_actions(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_unfinished_actions(integer) TO pulse_app;
