/**
 * The noisy tenant of bench/deliveries-scale.ts, in a process of its own (so
 * its HTTP client's CPU is not the measuring process's): creates groups in
 * one organization, 16 at a time, as fast as the server answers, until
 * killed. Arguments: base URL, bearer token, organization uid.
 */
import { restCreateGroup } from "../scripts/support/groups-client.js";

const [url, token, org] = process.argv.slice(2) as [string, string, string];
let n = 0;
await Promise.all(
  Array.from({ length: 16 }, async () => {
    for (;;) await restCreateGroup(url, token, org, `noise-${process.pid}-${n++}`);
  }),
);
