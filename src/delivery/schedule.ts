import { positionBefore, type FeedPosition } from "../domain/events.js";
import { ancestorsOf, rootOf } from "../domain/uidp.js";
import type { EventHeader } from "../store/event-store.js";
import type { DeliveryState, DeliveryTarget } from "../store/subscription-store.js";
import { typeMatches } from "./subscriber.js";

/**
 * What one deliverer knows of the subscriptions it may claim, and which of
 * them it claims next (docs/events.md, "Claiming"). Nothing here does I/O:
 * the deliverer feeds it the feed's new events (EventStore.scan), the
 * subscriptions (SubscriptionStore.targets) and delivery states it reads,
 * and asks it whom to claim.
 *
 * A subscription has work when an event in its group's subtree, of one of
 * its types, lies past its cursor, or when its retry is due. The deliverer
 * learns the first from the events it scans, so a caught-up subscription is
 * never claimed, nor its feed read, until an event that may concern it is
 * committed: an idle deployment reads one empty scan per poll, whatever its
 * number of subscriptions. Work is claimed in order of how long it has
 * waited, with every organization that waits served before any holds more
 * than its share of the slots.
 */

/** One subscription as the schedule tracks it. */
interface Entry {
  target: DeliveryTarget;
  /** The organization whose share its deliveries count against (the root of its group). */
  org: string;
  /** The newest position at or before which events may concern it: past its cursor, it has work. */
  pending: FeedPosition;
  /** Since when its oldest work has waited (ms); null when it has none known. */
  waitingSince: number | null;
  /** When its retry is due (ms); 0 when it is not retrying. */
  retryAt: number;
  /** Another process holds its lease until then (ms). */
  heldUntil: number;
  /** This process is delivering it now. */
  running: boolean;
  /** While it runs: the commit time of the event its loop is delivering (ms), null between events. */
  delivering: number | null;
}

/** How a delivery loop ended, as the schedule needs to know it. */
export type LoopEnd =
  /** It read the feed up to cursor and found nothing more. */
  | { kind: "caught-up"; cursor: FeedPosition }
  /** It used its turn (a batch or its time) with more to deliver: it waits again, behind work already waiting. */
  | { kind: "yielded"; cursor: FeedPosition }
  /** An event is to be tried again at `at`. */
  | { kind: "retry"; at: number }
  /** It lost its lease or failed: whether it still has work is read again. */
  | { kind: "unknown" };

/** The bounds of a schedule. */
export interface ScheduleOptions {
  /** Subscriptions delivered at once by the process. */
  concurrency: number;
  /**
   * Slots an organization that already has a delivery running may not take:
   * kept for organizations that have none, so a newcomer's first event finds
   * a slot even while another tenant's slow sinks hold the rest (default:
   * an eighth of the slots).
   */
  reserve?: number;
}

export class DeliverySchedule {
  private readonly entries = new Map<string, Entry>();
  /**
   * The entries whose waitingSince is set: what unsure, choose and nextDue
   * look through, so a tick costs in proportion to the work waiting, not to
   * the number of subscriptions.
   */
  private readonly waiting = new Set<Entry>();
  /** The targets last synced (a cached answer is the same frozen array while the table is unchanged). */
  private synced: readonly DeliveryTarget[] | undefined;
  /** Entries by group uid, for the ancestors of each event's subject. */
  private readonly byGroup = new Map<string, Entry[]>();
  private readonly runningByOrg = new Map<string, number>();
  private readonly concurrency: number;
  private readonly reserve: number;

  constructor(opts: ScheduleOptions) {
    this.concurrency = opts.concurrency;
    this.reserve = opts.reserve ?? Math.floor(opts.concurrency / 8);
  }

  /** Subscriptions tracked. */
  get size(): number {
    return this.entries.size;
  }

  /**
   * Tracks targets (every subscription) and forgets any other. A new one
   * may have work up to `head`, where the process's scan of the feed has
   * got to: its cursor is read before it is claimed, so one already past
   * head (caught up in another process) is never claimed for nothing.
   */
  sync(targets: readonly DeliveryTarget[], head: FeedPosition, now: number): void {
    if (targets === this.synced) return;
    this.synced = targets;
    const seen = new Set<string>();
    for (const target of targets) {
      seen.add(target.uid);
      const known = this.entries.get(target.uid);
      if (known !== undefined && known.target === target) continue;
      if (known !== undefined && sameTarget(known.target, target)) {
        known.target = target;
        continue;
      }
      if (known !== undefined) this.remove(known);
      const entry: Entry = {
        target,
        org: rootOf(target.groupUid),
        pending: head,
        waitingSince: null,
        retryAt: 0,
        heldUntil: 0,
        running: false,
        delivering: null,
      };
      this.entries.set(target.uid, entry);
      this.wait(entry, now);
      const list = this.byGroup.get(target.groupUid);
      if (list) list.push(entry);
      else this.byGroup.set(target.groupUid, [entry]);
    }
    if (seen.size !== this.entries.size)
      for (const entry of [...this.entries.values()]) if (!seen.has(entry.target.uid)) this.remove(entry);
  }

  /** Events committed since the last scan: every subscription each may concern has work since its commit. */
  observe(events: readonly EventHeader[]): void {
    for (const e of events) {
      this.mark(e, e.subject);
      for (const group of ancestorsOf(e.subject)) this.mark(e, group);
    }
  }

  /**
   * What the store says of some subscriptions' delivery: their cursors,
   * retries and leases. One whose cursor has passed everything known to
   * concern it, and that is not retrying, has no work.
   */
  apply(states: readonly DeliveryState[], now: number): void {
    for (const state of states) {
      const entry = this.entries.get(state.uid);
      if (entry === undefined || entry.running) continue;
      entry.retryAt = state.nextAttemptAt;
      entry.heldUntil = state.leaseUntil > now ? state.leaseUntil : 0;
      if (state.nextAttemptAt > 0) this.wait(entry, state.nextAttemptAt);
      else if (state.cursor !== null && !positionBefore(state.cursor, entry.pending)) this.wait(entry, null);
      else this.wait(entry, entry.waitingSince ?? now);
    }
  }

  /**
   * At most limit subscriptions that may have work now and are neither
   * running here nor known to be held elsewhere, whose state to read: taken
   * in turn from each organization, its longest-waiting first, so however
   * many subscriptions wait (one tenant may have thousands), a tick reads a
   * bounded number and every organization's are among them.
   */
  unsure(now: number, limit: number): string[] {
    const byOrg = this.waitingByOrg(now, (entry) => entry.heldUntil <= now);
    const out: string[] = [];
    for (let round = 0; out.length < limit; round++) {
      let any = false;
      for (const list of byOrg.values()) {
        const entry = list[round];
        if (entry === undefined) continue;
        any = true;
        out.push(entry.target.uid);
        if (out.length === limit) break;
      }
      if (!any) break;
    }
    return out;
  }

  /**
   * Chooses at most `free` subscriptions with work to claim, fairly: each
   * time, from the organization with the fewest deliveries running or
   * chosen (ties: the one whose work has waited longest), its subscription
   * waiting longest. No organization is given more than its share of the
   * slots (the slots over the organizations running or waiting) while
   * another waits, and one already running gets none of the reserved slots.
   */
  choose(free: number, now: number): string[] {
    if (free <= 0) return [];
    const waiting = this.waitingByOrg(now, (entry) => entry.heldUntil <= now && entry.retryAt <= now);
    if (waiting.size === 0) return [];
    const active = new Set([...waiting.keys(), ...this.runningByOrg.keys()]);
    const share = Math.max(1, Math.ceil(this.concurrency / active.size));
    let busy = this.concurrency - free;
    const load = new Map<string, number>();
    const loadOf = (org: string) => load.get(org) ?? this.runningByOrg.get(org) ?? 0;
    const chosen: string[] = [];
    while (chosen.length < free) {
      let best: string | undefined;
      for (const [org, list] of waiting) {
        const n = loadOf(org);
        if (list.length === 0 || n >= share) continue;
        if (n > 0 && busy >= this.concurrency - this.reserve) continue;
        if (best === undefined) {
          best = org;
          continue;
        }
        const m = loadOf(best);
        if (n < m || (n === m && list[0]!.waitingSince! < waiting.get(best)![0]!.waitingSince!)) best = org;
      }
      if (best === undefined) break;
      const entry = waiting.get(best)!.shift()!;
      chosen.push(entry.target.uid);
      load.set(best, loadOf(best) + 1);
      busy++;
    }
    return chosen;
  }

  /** This process now delivers uid (its claim succeeded). */
  started(uid: string): void {
    const entry = this.entries.get(uid);
    if (entry === undefined || entry.running) return;
    entry.running = true;
    // What the loop reads covers the work waiting now; events observed while it runs wait anew.
    this.wait(entry, null);
    entry.retryAt = 0;
    entry.heldUntil = 0;
    this.runningByOrg.set(entry.org, (this.runningByOrg.get(entry.org) ?? 0) + 1);
  }

  /** The loop delivering uid is posting an event committed at eventTime (ms): its lag while it runs. */
  delivering(uid: string, eventTime: number): void {
    const entry = this.entries.get(uid);
    if (entry?.running) entry.delivering = eventTime;
  }

  /** The loop delivering uid has ended, how it ended. */
  ended(uid: string, end: LoopEnd, now: number): void {
    const entry = this.entries.get(uid);
    if (entry === undefined || !entry.running) return;
    this.stopRunning(entry);
    switch (end.kind) {
      case "caught-up":
        // An event observed while it ran that its last read did not reach keeps its waiting time.
        this.wait(entry, positionBefore(end.cursor, entry.pending) ? (entry.waitingSince ?? now) : null);
        break;
      case "retry":
        entry.retryAt = end.at;
        this.wait(entry, end.at);
        break;
      case "yielded":
      case "unknown":
        this.wait(entry, now);
        break;
    }
  }

  /** The earliest time (ms) a subscription not ready now becomes ready (a retry, a lease held elsewhere), or null. */
  nextDue(now: number): number | null {
    let next: number | null = null;
    for (const entry of this.waiting) {
      if (entry.running) continue;
      const at = Math.max(entry.waitingSince!, entry.heldUntil);
      if (at > now && (next === null || at < next)) next = at;
    }
    return next;
  }

  /**
   * Each subscription's lag (seconds) as this process sees it: while it
   * delivers one, the age of the event being posted; else how long its
   * oldest known work has waited; 0 when it has none, or while another
   * process holds it (that process reports it).
   */
  lags(now: number): [uid: string, seconds: number][] {
    const out: [string, number][] = [];
    for (const entry of this.entries.values()) {
      const since = entry.running ? entry.delivering : entry.heldUntil > now ? null : entry.waitingSince;
      out.push([entry.target.uid, since === null || since > now ? 0 : (now - since) / 1000]);
    }
    return out;
  }

  private mark(e: EventHeader, group: string): void {
    const list = this.byGroup.get(group);
    if (list === undefined) return;
    for (const entry of list) {
      if (!typeMatches(entry.target.types, e.type)) continue;
      if (positionBefore(entry.pending, e.position)) entry.pending = e.position;
      if (entry.waitingSince === null || e.time < entry.waitingSince) this.wait(entry, entry.retryAt > 0 ? entry.retryAt : e.time);
    }
  }

  /** Sets since when entry's work has waited (null: it has none), keeping the waiting set in step. */
  private wait(entry: Entry, since: number | null): void {
    entry.waitingSince = since;
    if (since === null) this.waiting.delete(entry);
    else this.waiting.add(entry);
  }

  /** The waiting entries ready at now (not running, work due, and pass), by organization, longest-waiting first. */
  private waitingByOrg(now: number, pass: (entry: Entry) => boolean): Map<string, Entry[]> {
    const byOrg = new Map<string, Entry[]>();
    for (const entry of this.waiting) {
      if (entry.running || entry.waitingSince! > now || !pass(entry)) continue;
      const list = byOrg.get(entry.org);
      if (list) list.push(entry);
      else byOrg.set(entry.org, [entry]);
    }
    for (const list of byOrg.values()) list.sort(byWaiting);
    return byOrg;
  }

  /** entry no longer runs here: its organization's count goes down. */
  private stopRunning(entry: Entry): void {
    entry.running = false;
    entry.delivering = null;
    const left = (this.runningByOrg.get(entry.org) ?? 1) - 1;
    if (left === 0) this.runningByOrg.delete(entry.org);
    else this.runningByOrg.set(entry.org, left);
  }

  private remove(entry: Entry): void {
    this.entries.delete(entry.target.uid);
    this.waiting.delete(entry);
    const list = this.byGroup.get(entry.target.groupUid);
    if (list) {
      const i = list.indexOf(entry);
      if (i >= 0) list.splice(i, 1);
      if (list.length === 0) this.byGroup.delete(entry.target.groupUid);
    }
    if (entry.running) this.stopRunning(entry);
  }
}

function byWaiting(a: Entry, b: Entry): number {
  return a.waitingSince! - b.waitingSince!;
}

function sameTarget(a: DeliveryTarget, b: DeliveryTarget): boolean {
  return a.groupUid === b.groupUid && a.types.length === b.types.length && a.types.every((t, i) => t === b.types[i]);
}
