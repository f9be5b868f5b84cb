-- Event matching by index, not by reading every routine of the user.
--
-- 0004 made ruling a routine out cheap (a strpos on its literal), but every
-- event still read all of its user's event routines: at a thousand routines,
-- half a millisecond per event before anything fired. A literal that occurs
-- in the content brings each of its four-character windows along, its last
-- one included; so indexing routines by the last four characters of their
-- literal lets an event find its candidates with one probe per distinct
-- four-character window of its content, whatever the number of routines.
-- Literals shorter than four characters (and patterns with none) cannot be
-- found that way and have an index of their own: they are always candidates.

set local search_path = ceaseless, pg_catalog, public;

create index routines_event_key_idx
    on routines (user_id, right(event_literal, 4))
    where enabled and trigger_type = 'event' and char_length(event_literal) >= 4;

create index routines_event_keyless_idx
    on routines (user_id)
    where enabled and trigger_type = 'event' and char_length(event_literal) < 4;

-- Together the two cover every enabled event routine, so the index of all of
-- them goes: left in place, a planner without statistics on routines (a user
-- who has just created a thousand) may pick it for the probe, which then
-- reads every routine of the user again.
drop index idx_routines_event_triggers;
