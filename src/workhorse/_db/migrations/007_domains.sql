-- 007: the hot tables' CHECK constraints become domain types. Placeholder {schema} is replaced by
-- the schema name.
--
-- Same rules, cheaper to keep. PostgreSQL rebuilds a table CHECK from its stored text and plans it
-- again in every statement that writes the table: about 20 us of backend CPU per constraint per
-- statement on a 2-core machine, a tenth of a single enqueue's. A domain's checks are planned once per session and cached, so a
-- write pays only for evaluating them. Clients see the base type (text, integer): PostgreSQL sends
-- a domain column's base type in every row description.
--
-- Changing a column's type rewrites the table once, inside this migration's transaction.

-- Written to run again harmlessly (the DBA script may be applied twice): PostgreSQL has no
-- "create domain if not exists", so each is created only when its name is free.
do $$
begin
    if to_regtype('{schema}.job_state') is null then
        create domain {schema}.job_state as text
            check (value in ('ready', 'delayed', 'running', 'suspended', 'done', 'failed', 'dead', 'cancelled'));
    end if;
    if to_regtype('{schema}.step_state') is null then
        create domain {schema}.step_state as text check (value in ('done', 'failed', 'sleeping', 'waiting'));
    end if;
    if to_regtype('{schema}.counter_tier') is null then
        create domain {schema}.counter_tier as text check (value in ('minute', 'hour', 'day'));
    end if;
    -- attempt and claims count up from 0; max_attempts is at least 1.
    if to_regtype('{schema}.tally') is null then
        create domain {schema}.tally as integer check (value >= 0);
    end if;
    if to_regtype('{schema}.attempt_limit') is null then
        create domain {schema}.attempt_limit as integer check (value >= 1);
    end if;
end
$$;

alter table {schema}.jobs
    drop constraint if exists jobs_state_known,
    drop constraint if exists jobs_attempts_sane,
    alter column state type {schema}.job_state,
    alter column attempt type {schema}.tally,
    alter column claims type {schema}.tally,
    alter column max_attempts type {schema}.attempt_limit;

alter table {schema}.steps
    drop constraint if exists steps_state_known,
    alter column state type {schema}.step_state;

alter table {schema}.counters
    drop constraint if exists counters_tier_known,
    alter column tier type {schema}.counter_tier;
