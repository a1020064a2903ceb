-- How the preflight's model answer came: streamed, or buffered when the route does not stream
-- (its setting, or a server that refused a streamed request with tools). NULL: no answer came,
-- or the preflight ran before this was recorded.

ALTER TABLE patrol_preflights
    ADD COLUMN transport text CHECK (transport IN ('streamed', 'buffered'));
