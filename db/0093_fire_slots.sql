-- A fire takes as many of the sixteen fire slots as its size needs
-- (_take_fire_slots, functions/41_fire_admission.sql), so two listeners'
-- cron batches are admitted side by side; the one-slot form goes.

set local search_path = ceaseless, pg_catalog, public;

drop function if exists _take_fire_slot();
