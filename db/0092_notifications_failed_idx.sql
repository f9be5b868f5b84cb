-- The notifications given up on, for notification_status (functions/90_views.sql),
-- which reads the ones still to deliver (notifications_pending_idx) and these,
-- never the delivered history. Built concurrently: after months the table is
-- large, and a plain CREATE INDEX would hold every delivery for the build.

create index concurrently if not exists notifications_failed_idx
    on notifications (created_at)
    where status = 'failed';
