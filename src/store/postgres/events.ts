import type { EventDraft, EventKind, FeedPosition } from "../../domain/events.js";
import { EVENT_SCAN_LIMIT, type EventPage, type EventQuery, type EventScan, type EventStore } from "../event-store.js";
import { choosePage, draftRow, pageOf, scannedRoots, scanOf, type EventCandidate } from "../sql/events.js";
import { numbered, type Queryable } from "./list.js";
import type { Runner } from "./tx.js";

interface CandidateRow {
  txid: string;
  seq: string;
  id: string;
  kind: string;
  type: string;
  subject: string;
  group_uid: string;
  time: string;
}

// The positions travel as text (a bigint and an xid8 exceed a JS number); ORDER BY names the table's columns, not
// these aliases, or the feed would be sorted as text (…, 99, 100, 1000, 101, …).
const CANDIDATE_COLUMNS = "txid::text AS txid, seq::text AS seq, id, kind, type, subject, group_uid, time::text AS time";

function candidate(r: CandidateRow): EventCandidate {
  return {
    position: { txid: BigInt(r.txid), seq: BigInt(r.seq) },
    id: r.id,
    kind: r.kind as EventKind,
    type: r.type,
    subject: r.subject,
    groupUid: r.group_uid,
    time: Number(r.time),
  };
}

/** Candidates after `after` and below the horizon's transaction, in feed order, optionally on one root. */
async function scan(
  q: Queryable,
  after: FeedPosition,
  horizonTxid: bigint,
  root: string | null,
  limit = EVENT_SCAN_LIMIT,
): Promise<CandidateRow[]> {
  const where = root === null ? "" : "root = ? AND ";
  const params: unknown[] = root === null ? [] : [root];
  params.push(String(after.txid), String(after.seq), String(horizonTxid), limit);
  const sql = `SELECT ${CANDIDATE_COLUMNS} FROM events
    WHERE ${where}(txid, seq) > (?::xid8, ?::bigint) AND txid < ?::xid8 ORDER BY events.txid, events.seq LIMIT ?`;
  return (await q.query<CandidateRow>(numbered(sql), params)).rows;
}

/** The feed's horizon (every transaction below it has ended) and where pruning has reached. */
const HEAD_SQL =
  "SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin, pruned_txid::text AS pruned_txid, pruned_seq::text AS pruned_seq FROM event_feed";

/** The INSERT of a change's events, its 8 array parameters numbered from first. */
function eventsInsert(first: number): string {
  const p = (i: number, type: string) => `$${first + i}::${type}[]`;
  return `INSERT INTO events (id, kind, type, subject, root, group_uid, time, data)
    SELECT * FROM unnest(${p(0, "text")}, ${p(1, "text")}, ${p(2, "text")}, ${p(3, "text")}, ${p(4, "text")}, ${p(5, "text")}, ${p(6, "bigint")}, ${p(7, "text")})`;
}

/** The parameters of eventsInsert: one array per column. */
function eventsParams(events: readonly EventDraft[]): unknown[] {
  const rows = events.map(draftRow);
  return [
    rows.map((r) => r.id),
    rows.map((r) => r.kind),
    rows.map((r) => r.type),
    rows.map((r) => r.subject),
    rows.map((r) => r.root),
    rows.map((r) => r.groupUid),
    rows.map((r) => String(r.time)),
    rows.map((r) => r.data),
  ];
}

/** The statements found to be one plain INSERT (the store's own SQL: a few constant texts, each checked once). */
const PLAIN_INSERTS = new Set<string>();

function plainInsert(text: string): boolean {
  if (PLAIN_INSERTS.has(text)) return true;
  if (!/^\s*INSERT\s+INTO\s/i.test(text) || /\bON\s+CONFLICT\b/i.test(text)) return false;
  if (PLAIN_INSERTS.size < 256) PLAIN_INSERTS.add(text);
  return true;
}

/**
 * A runner for one INSERT that carries its events with it: the statement
 * becomes `WITH platform_events AS (INSERT INTO events …) INSERT …`, one
 * statement in autocommit, so the row and its events commit together or
 * not at all, with no BEGIN and COMMIT round trips (Store.insertWithEvents).
 * Only an INSERT without ON CONFLICT qualifies (an UPDATE or DELETE matching
 * nothing, or a conflict skipped, would still write the events), and only
 * one statement: anything else is a programming error, thrown.
 */
export function eventsCarryingRunner(q: Queryable, events: readonly EventDraft[]): Runner {
  let used = false;
  const refuse = (why: string): never => {
    throw new Error(`insertWithEvents: ${why}`);
  };
  const carrier: Queryable = {
    query<R>(text: string, params: unknown[] = []) {
      if (used) refuse("the write made a second statement");
      used = true;
      if (!plainInsert(text)) refuse("the write is not one plain INSERT");
      if (events.length === 0) return q.query<R>(text, params);
      return q.query<R>(`WITH platform_events AS (${eventsInsert(params.length + 1)}) ${text}`, [...params, ...eventsParams(events)]);
    },
  };
  return { q: carrier, atomically: () => refuse("the write opened a transaction") };
}

/**
 * The change feed on PostgreSQL (docs/events.md). Transactions commit out
 * of seq order, so the feed is ordered by the writing transaction's id
 * (txid, pg_current_xact_id() at insert), then seq, and a read returns only
 * events of transactions below the oldest one still running
 * (pg_snapshot_xmin of the current snapshot): those have all ended, and any
 * transaction that writes later gets a larger id. Once a reader passes a
 * position, nothing can appear before it.
 */
export class PgEventStore implements EventStore {
  constructor(private readonly run: Runner) {}

  async append(events: readonly EventDraft[]): Promise<void> {
    if (events.length === 0) return;
    // One statement for the change's events, whatever their number.
    await this.run.q.query(eventsInsert(1), eventsParams(events));
  }

  async read(query: EventQuery): Promise<EventPage> {
    const q = this.run.q;
    // The horizon first: every transaction below it has ended, whatever commits while the scan runs.
    const head = await q.query<{ xmin: string; pruned_txid: string; pruned_seq: string }>(HEAD_SQL);
    const row = head.rows[0]!;
    const horizon: FeedPosition = { txid: BigInt(row.xmin), seq: 0n };
    const pruned: FeedPosition = { txid: BigInt(row.pruned_txid), seq: BigInt(row.pruned_seq) };
    let after: FeedPosition;
    if (query.after !== null) {
      const a = query.after;
      if (a.txid < pruned.txid || (a.txid === pruned.txid && a.seq < pruned.seq)) return { events: [], resume: a, expired: true };
      after = a;
    } else if (query.startTime !== undefined) {
      after = await this.justBefore(query.startTime, horizon);
    } else {
      after = { txid: 0n, seq: 0n };
    }
    const roots = scannedRoots(query);
    let rows: CandidateRow[];
    if (roots === null) {
      rows = await scan(q, after, horizon.txid, null);
    } else {
      rows = (await Promise.all(roots.map((root) => scan(q, after, horizon.txid, root)))).flat();
      if (roots.length > 1) {
        rows.sort((x, y) => {
          const dt = BigInt(x.txid) - BigInt(y.txid);
          return dt !== 0n ? (dt < 0n ? -1 : 1) : Number(BigInt(x.seq) - BigInt(y.seq));
        });
      }
      rows.splice(EVENT_SCAN_LIMIT);
    }
    const { chosen, resume } = choosePage(rows.map(candidate), query, horizon, after);
    const data = new Map<string, string>();
    if (chosen.length > 0) {
      const found = await q.query<{ id: string; data: string }>(
        "SELECT id, data FROM events WHERE (txid, seq) IN (SELECT * FROM unnest($1::xid8[], $2::bigint[]))",
        [chosen.map((c) => String(c.position.txid)), chosen.map((c) => String(c.position.seq))],
      );
      for (const r of found.rows) data.set(r.id, r.data);
    }
    return pageOf(chosen, data, resume);
  }

  async scan(after: FeedPosition | null, limit: number): Promise<EventScan> {
    const q = this.run.q;
    const head = await q.query<{ xmin: string }>(HEAD_SQL);
    const horizon: FeedPosition = { txid: BigInt(head.rows[0]!.xmin), seq: 0n };
    if (after === null) return scanOf([], limit, horizon, null);
    const rows = await scan(q, after, horizon.txid, null, Math.min(limit, EVENT_SCAN_LIMIT));
    return scanOf(rows.map(candidate), limit, horizon, after);
  }

  /** The position just before the first event (in feed order) whose time is at or after `time`; the horizon when none is. */
  private async justBefore(time: number, horizon: FeedPosition): Promise<FeedPosition> {
    const first = await this.run.q.query<{ txid: string; seq: string }>(
      "SELECT txid::text AS txid, seq::text AS seq FROM events WHERE time >= $1 AND txid < $2::xid8 ORDER BY events.txid, events.seq LIMIT 1",
      [time, String(horizon.txid)],
    );
    const f = first.rows[0];
    if (f === undefined) return horizon;
    // seq starts at 1: the position just before (txid, seq) is (txid, seq - 1).
    return { txid: BigInt(f.txid), seq: BigInt(f.seq) - 1n };
  }

  async prune(before: number, limit: number): Promise<number> {
    // SKIP LOCKED: processes pruning at once take different rows.
    const { rows } = await this.run.q.query<{ n: number; txid: string | null; seq: string | null }>(
      `WITH doomed AS (
         SELECT txid, seq FROM events WHERE time < $1 ORDER BY txid, seq LIMIT $2 FOR UPDATE SKIP LOCKED
       ), gone AS (
         DELETE FROM events e USING doomed d WHERE e.txid = d.txid AND e.seq = d.seq RETURNING e.txid, e.seq
       ), newest AS (
         SELECT txid, seq FROM gone ORDER BY txid DESC, seq DESC LIMIT 1
       )
       SELECT (SELECT count(*) FROM gone)::int AS n, (SELECT txid::text FROM newest) AS txid, (SELECT seq::text FROM newest) AS seq`,
      [before, limit],
    );
    const { n, txid, seq } = rows[0]!;
    if (n === 0 || txid === null || seq === null) return 0;
    await this.run.q.query(
      `UPDATE event_feed SET pruned_txid = $1::xid8, pruned_seq = $2::bigint
       WHERE id = 1 AND (pruned_txid, pruned_seq) < ($1::xid8, $2::bigint)`,
      [txid, seq],
    );
    return n;
  }
}
