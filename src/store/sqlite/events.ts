import type { Database, Statement } from "better-sqlite3";
import type { EventDraft, EventKind, FeedPosition } from "../../domain/events.js";
import { EVENT_SCAN_LIMIT, type EventPage, type EventQuery, type EventScan, type SyncEventStore } from "../event-store.js";
import { choosePage, draftRow, pageOf, scannedRoots, scanOf, type EventCandidate } from "../sql/events.js";

interface CandidateRow {
  seq: number;
  id: string;
  kind: string;
  type: string;
  subject: string;
  group_uid: string;
  time: number;
}

const CANDIDATE_COLUMNS = "seq, id, kind, type, subject, group_uid, time";

function candidate(r: CandidateRow): EventCandidate {
  return {
    position: { txid: 0n, seq: BigInt(r.seq) },
    id: r.id,
    kind: r.kind as EventKind,
    type: r.type,
    subject: r.subject,
    groupUid: r.group_uid,
    time: r.time,
  };
}

/**
 * The change feed on SQLite. Writers take the database's write lock one at a
 * time (group commit batches a process's writers into one transaction), so
 * seq, assigned at insert, is commit order: a position's txid is always 0.
 * A read takes its horizon (the highest seq) before scanning, so an event
 * committed meanwhile has a higher seq and is left for the next read.
 */
export class SqliteEventStore implements SyncEventStore {
  private readonly insertStmt: Statement;
  private readonly maxSeqStmt: Statement;
  private readonly firstAtStmt: Statement;
  private readonly scanAllStmt: Statement;
  private readonly scanRootStmt: Statement;
  private readonly dataStmt: Statement;
  private readonly prunedStmt: Statement;
  private readonly pruneStmt: Statement;
  private readonly markStmt: Statement;

  constructor(db: Database) {
    this.insertStmt = db.prepare(
      `INSERT INTO events (id, kind, type, subject, root, group_uid, time, data)
       VALUES (@id, @kind, @type, @subject, @root, @groupUid, @time, @data)`,
    );
    this.maxSeqStmt = db.prepare("SELECT coalesce(max(seq), 0) FROM events").pluck();
    this.firstAtStmt = db.prepare("SELECT min(seq) FROM events WHERE time >= ?").pluck();
    this.scanAllStmt = db.prepare(`SELECT ${CANDIDATE_COLUMNS} FROM events WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?`);
    this.scanRootStmt = db.prepare(`SELECT ${CANDIDATE_COLUMNS} FROM events WHERE root = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?`);
    this.dataStmt = db.prepare("SELECT id, data FROM events WHERE seq = ?");
    this.prunedStmt = db.prepare("SELECT pruned_seq FROM event_feed WHERE id = 1").pluck();
    this.pruneStmt = db.prepare(
      "DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE time < ? ORDER BY seq LIMIT ?) RETURNING seq",
    );
    this.markStmt = db.prepare("UPDATE event_feed SET pruned_seq = max(pruned_seq, ?) WHERE id = 1");
  }

  append(events: readonly EventDraft[]): void {
    for (const e of events) this.insertStmt.run(draftRow(e));
  }

  read(q: EventQuery): EventPage {
    const horizonSeq = this.maxSeqStmt.get() as number;
    const horizon: FeedPosition = { txid: 0n, seq: BigInt(horizonSeq) };
    const pruned = this.prunedStmt.get() as number;
    let afterSeq: number;
    if (q.after !== null) {
      if (q.after.txid !== 0n || q.after.seq < BigInt(pruned)) return { events: [], resume: q.after, expired: true };
      afterSeq = Number(q.after.seq);
    } else if (q.startTime !== undefined) {
      const first = this.firstAtStmt.get(q.startTime) as number | null;
      afterSeq = first === null ? horizonSeq : first - 1;
    } else {
      afterSeq = 0;
    }
    const roots = scannedRoots(q);
    const rows: CandidateRow[] = [];
    if (roots === null) {
      rows.push(...(this.scanAllStmt.all(afterSeq, horizonSeq, EVENT_SCAN_LIMIT) as CandidateRow[]));
    } else {
      // Each root's events are an index range; merged in seq order, then cut to the scan limit.
      for (const root of roots) rows.push(...(this.scanRootStmt.all(root, afterSeq, horizonSeq, EVENT_SCAN_LIMIT) as CandidateRow[]));
      if (roots.length > 1) rows.sort((a, b) => a.seq - b.seq);
      rows.splice(EVENT_SCAN_LIMIT);
    }
    const start: FeedPosition = { txid: 0n, seq: BigInt(afterSeq) };
    const { chosen, resume } = choosePage(rows.map(candidate), q, horizon, start);
    const data = new Map<string, string>();
    for (const c of chosen) data.set(c.id, (this.dataStmt.get(Number(c.position.seq)) as { data: string }).data);
    return pageOf(chosen, data, resume);
  }

  scan(after: FeedPosition | null, limit: number): EventScan {
    const horizon: FeedPosition = { txid: 0n, seq: BigInt(this.maxSeqStmt.get() as number) };
    if (after === null) return scanOf([], limit, horizon, null);
    const rows = this.scanAllStmt.all(Number(after.seq), Number(horizon.seq), Math.min(limit, EVENT_SCAN_LIMIT)) as CandidateRow[];
    return scanOf(rows.map(candidate), limit, horizon, after);
  }

  prune(before: number, limit: number): number {
    const deleted = this.pruneStmt.all(before, limit) as { seq: number }[];
    if (deleted.length > 0) this.markStmt.run(Math.max(...deleted.map((d) => d.seq)));
    return deleted.length;
  }
}
