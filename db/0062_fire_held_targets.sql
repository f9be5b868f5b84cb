-- fire_held takes the routines and loops to try (p_targets): a listener names
-- the ones whose run ended, so a call reads their first held fires and the
-- timed ones due, not every held fire of every routine. Its body lives in
-- functions/33_held_fires.sql; the two-argument form goes, as a call naming
-- two arguments would otherwise be ambiguous between them.
drop function if exists fire_held(timestamptz, integer);
