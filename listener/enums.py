"""The enum-like values the database stores as text + CHECK lists.

Each class mirrors one CHECK list in `db/`; `tests/sql/test_enums_match_checks.py`
parses the migrations with pglast and asserts the two agree, so adding a value is
one migration plus one line here, and forgetting either fails the suite.
"""

from enum import StrEnum


class JobState(StrEnum):
    PENDING = "pending"
    CLAIMED = "claimed"
    RUNNING = "running"
    DELIVERED = "delivered"
    BLOCKED = "blocked"
    FAILED = "failed"
    ABANDONED = "abandoned"
    CANCELLED = "cancelled"


class JobKind(StrEnum):
    DISCOVER = "discover"
    PLAN = "plan"
    IMPLEMENT = "implement"
    ROUTINE = "routine"
    LOOP_NODE = "loop_node"
    TASK = "task"


# The kinds the forge intake creates and the forge runner runs.
FORGE_KINDS = frozenset({JobKind.DISCOVER, JobKind.PLAN, JobKind.IMPLEMENT})


class Forge(StrEnum):
    GITEA = "gitea"
    GITHUB = "github"


class Adapter(StrEnum):
    CLAUDE_CODE = "claude_code"
    OPENCODE = "opencode"
    COMMAND = "command"
    NOOP = "noop"


class Fairness(StrEnum):
    FIFO = "fifo"
    ROUND_ROBIN = "round_robin"


class Billing(StrEnum):
    SUBSCRIPTION = "subscription"
    API_KEY = "api_key"
    UNKNOWN = "unknown"


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RATE_LIMITED = "rate_limited"
    BUDGET_EXHAUSTED = "budget_exhausted"
    OUTPUT_BUDGET_EXHAUSTED = "output_budget_exhausted"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    LEASE_EXPIRED = "lease_expired"
    AUTH_FAILED = "auth_failed"
    # Decided in SQL, never by an adapter: a forge run whose reply asked for a
    # human (functions/72_forge_verdict.sql); its job is blocked.
    NEEDS_HUMAN = "needs_human"


class TriggerType(StrEnum):
    CRON = "cron"
    EVENT = "event"
    WEBHOOK = "webhook"
    MANUAL = "manual"


class RunTriggerType(StrEnum):
    """What fired a routine run: a routine's trigger, or a backfill of a cron slot."""

    CRON = "cron"
    EVENT = "event"
    WEBHOOK = "webhook"
    MANUAL = "manual"
    BACKFILL = "backfill"


class ActionType(StrEnum):
    LIGHTWEIGHT = "lightweight"
    FULL_JOB = "full_job"


class RoutineRunStatus(StrEnum):
    RUNNING = "running"
    OK = "ok"
    ATTENTION = "attention"
    FAILED = "failed"
    SKIPPED = "skipped"


class SkipReason(StrEnum):
    COOLDOWN = "cooldown"
    CONCURRENCY = "concurrency"
    DEDUP = "dedup"
    GLOBAL_CAP = "global_cap"
    MISSED_SLOTS = "missed_slots"
    DISABLED = "disabled"
    AGENT_DISABLED = "agent_disabled"


class TopologyRunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


class TopologyNodeState(StrEnum):
    WAITING = "waiting"
    AWAITING_APPROVAL = "awaiting_approval"
    QUEUED = "queued"
    RUNNING = "running"
    BLOCKED = "blocked"
    SUCCEEDED = "succeeded"
    SKIPPED = "skipped"
    FAILED = "failed"
    CANCELLED = "cancelled"


class NodeGate(StrEnum):
    APPROVAL = "approval"


class LoopTrigger(StrEnum):
    CRON = "cron"
    ON_COMPLETION = "on_completion"
    WEBHOOK = "webhook"
    MANUAL = "manual"
    EVENT = "event"
    BACKFILL = "backfill"


class LoopSkipReason(StrEnum):
    LIVE_ITERATION = "live_iteration"
    DISABLED = "disabled"
    AGENT_DISABLED = "agent_disabled"


class OverlapPolicy(StrEnum):
    """What a fire an overlap rule refuses becomes (routines.overlap_policy)."""

    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    BUFFER_ALL = "buffer_all"
    CANCEL_OTHER = "cancel_other"
    ALLOW_ALL = "allow_all"


class LoopOverlapPolicy(StrEnum):
    """loops.overlap_policy: no allow_all, a loop's iterations form one chain."""

    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    BUFFER_ALL = "buffer_all"
    CANCEL_OTHER = "cancel_other"


class HeldReason(StrEnum):
    """Why a held fire waits (held_fires.reason)."""

    BUFFERED = "buffered"
    DEBOUNCED = "debounced"


class LoopStoppedReason(StrEnum):
    COMPLETED = "completed"
    EXHAUSTED = "exhausted"
    FAILED = "failed"
    CANCELLED = "cancelled"


class RepeatPolicyKind(StrEnum):
    INFINITE = "infinite"
    ITERS = "iters"
    UNTIL = "until"


class ApprovalDecision(StrEnum):
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


class NotificationKind(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    ATTENTION = "attention"
    STOPPED = "stopped"
    APPROVAL = "approval"


class NotificationSource(StrEnum):
    ROUTINE_RUNS = "routine_runs"
    TOPOLOGY_RUNS = "topology_runs"
    JOB = "job"
    LOOPS = "loops"
    APPROVALS = "approvals"


class Sandbox(StrEnum):
    """What confines a listener's agents, as it reports itself (listener_reports.sandbox)."""

    BWRAP = "bwrap"
    NONE = "none"
