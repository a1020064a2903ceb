-- A preflight whose one tool call the model wrote as text, and Pulse recovered, passes; the
-- count is kept so the settings page and the readiness view can say the route is weak. Rows from
-- before this migration recovered nothing.

ALTER TABLE patrol_preflights
    ADD COLUMN tool_calls_recovered integer NOT NULL DEFAULT 0 CHECK (tool_calls_recovered >= 0);
