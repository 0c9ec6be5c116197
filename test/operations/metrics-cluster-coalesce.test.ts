/**
 * Concurrent /metrics scrapes in worker mode share one collection: in the
 * primary, calls to ClusterMetrics.exposition() made while the workers are
 * being asked get that collection's answer (the workers are asked once, not
 * once per scrape); in a worker, scrapes waiting for the primary's view share
 * one request. So an anonymous flood of scrapes costs the cluster one
 * collection at a time. Driven over the real cluster-channel messages with
 * stand-in workers, so nothing depends on timing.
 */
import assert from "node:assert/strict";
import type { Worker } from "node:cluster";
import { test } from "node:test";
import { clusterExposition, ClusterMetrics } from "../../src/server/observe/metrics-cluster.js";

/** A stand-in for a cluster worker: records what the primary sends it. */
function standInWorker(id: number) {
  const sent: { type: string; id: number }[] = [];
  const worker = {
    id,
    isConnected: () => true,
    send: (message: { type: string; id: number }, callback?: (err: Error | null) => void) => {
      sent.push(message);
      callback?.(null);
      return true;
    },
  };
  return { worker: worker as unknown as Worker, sent };
}

/** A worker's numbers: one counter with the given value. */
function snapshot(id: number, seq: number, requests: number) {
  return {
    type: "platform-api:metrics-snapshot",
    id,
    seq,
    metrics: [{ name: "requests_total", help: "requests", type: "counter", aggregator: "sum", values: [{ value: requests, labels: {} }] }],
  };
}

test("the primary: 50 concurrent expositions ask each worker once, and all get the same sums", async () => {
  const a = standInWorker(1);
  const b = standInWorker(2);
  const metrics = new ClusterMetrics(
    () =>
      new Map([
        [a.worker, 1],
        [b.worker, 2],
      ]),
  );

  const scrapes = Array.from({ length: 50 }, () => metrics.exposition());
  assert.equal(a.sent.length, 1, "worker 1 is asked once for 50 scrapes");
  assert.equal(b.sent.length, 1, "worker 2 is asked once for 50 scrapes");

  metrics.onMessage(a.worker, snapshot(a.sent[0]!.id, 1, 3));
  metrics.onMessage(b.worker, snapshot(b.sent[0]!.id, 1, 4));
  const texts = await Promise.all(scrapes);
  assert.equal(new Set(texts).size, 1, "every scrape got the one collection's answer");
  assert.match(texts[0]!, /^requests_total 7$/m);
  assert.match(texts[0]!, /^platform_metrics_collections_total 1$/m);
  assert.match(texts[0]!, /^platform_metrics_stale_workers 0$/m);

  // The next scrape, after that collection ended, asks again and sees new numbers.
  const next = metrics.exposition();
  assert.equal(a.sent.length, 2);
  assert.equal(b.sent.length, 2);
  metrics.onMessage(a.worker, snapshot(a.sent[1]!.id, 2, 5));
  metrics.onMessage(b.worker, snapshot(b.sent[1]!.id, 2, 4));
  const text = await next;
  assert.match(text, /^requests_total 9$/m);
  assert.match(text, /^platform_metrics_collections_total 2$/m);
});

test("a worker: 50 concurrent scrapes send the primary one view request and all get its answer", async () => {
  const requests: { type: string; id: number }[] = [];
  const originalSend = process.send;
  process.send = ((message: { type: string; id: number }, callback?: (err: Error | null) => void) => {
    requests.push(message);
    callback?.(null);
    return true;
  }) as typeof process.send;
  try {
    const scrapes = Array.from({ length: 50 }, () => clusterExposition());
    assert.equal(requests.length, 1, "one request to the primary for 50 scrapes");
    process.emit("message", { type: "platform-api:metrics-view", id: requests[0]!.id, text: "requests_total 7\n" }, undefined);
    const texts = await Promise.all(scrapes);
    assert.deepEqual(new Set(texts), new Set(["requests_total 7\n"]));

    // A failed view fails every scrape that shared it, and the next scrape asks again.
    const failing = Array.from({ length: 3 }, () => clusterExposition());
    assert.equal(requests.length, 2);
    process.emit("message", { type: "platform-api:metrics-view", id: requests[1]!.id, error: "gone" }, undefined);
    for (const r of await Promise.allSettled(failing)) {
      assert.equal(r.status, "rejected");
      assert.match(String((r as PromiseRejectedResult).reason), /could not be gathered: gone/);
    }
    const again = clusterExposition();
    assert.equal(requests.length, 3);
    process.emit("message", { type: "platform-api:metrics-view", id: requests[2]!.id, text: "requests_total 8\n" }, undefined);
    assert.equal(await again, "requests_total 8\n");
  } finally {
    process.send = originalSend;
  }
});
