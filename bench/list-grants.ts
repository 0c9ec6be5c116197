/**
 * Issue 21 item 6, measured: what one List costs an identity that created
 * thousands of root organizations (each one a grant: its owner binding).
 *
 * An identity with no role creates BENCH_GRANT_STEPS organizations (default
 * 2,000 then 4,000 in all) over REST, as the attacker did; at each step it
 * sends ListGroups (uid order, name order, and name order with skip=1500)
 * and GET /auth/v1/ok, each BENCH_LIST_CALLS times. Before every call the
 * administrator renames a group, so no answer comes from the caches (the
 * worst case: a server taking writes). Printed: median and max latency per
 * call, /auth/v1/ok's bytes, and how long the creates took.
 *
 * The server runs in this process on a fresh store, with the quota raised so
 * the attack can be replayed: `npx tsx bench/list-grants.ts`, and
 * `PLATFORM_TEST_BACKEND=postgres npx tsx bench/list-grants.ts` on PostgreSQL.
 */
import { createGroup, rest, startTestServer } from "../test/support/server.js";

const STEPS = (process.env.BENCH_GRANT_STEPS ?? "2000,4000").split(",").map(Number);
const CALLS = Number(process.env.BENCH_LIST_CALLS ?? 7);

const srv = await startTestServer({ env: { PLATFORM_MAX_ORGS_PER_IDENTITY: "1000000" } });
try {
  const home = await createGroup(srv.url, null, "home");
  const identity = await rest(srv.url, "POST", `/iam/v2beta1/identities/${home.uid}`, {
    name: "attacker",
    claimMatch: { issuer: "https://ci.example", subject: "attacker" },
  });
  const token = (await srv.server.tokens.mint(identity.body.uid as string)).token;
  const as = { authorization: `Bearer ${token}` };
  const churn = await createGroup(srv.url, null, "churn");
  let made = 0;
  let n = 0;

  /** Median and max of CALLS calls of path as the attacker, each after a write that empties the caches. */
  const measure = async (path: string) => {
    const times: number[] = [];
    let bytes = 0;
    for (let i = 0; i < CALLS; i++) {
      await rest(srv.url, "PATCH", `/iam/v2beta1/groups/${churn.uid}?update_mask=name`, { uid: churn.uid, name: `churn ${n++}` });
      const start = performance.now();
      const res = await fetch(`${srv.url}${path}`, { headers: as });
      bytes = (await res.arrayBuffer()).byteLength;
      if (res.status !== 200) throw new Error(`${path}: ${res.status}`);
      times.push(performance.now() - start);
    }
    times.sort((a, b) => a - b);
    return `median ${times[times.length >> 1]!.toFixed(1)} ms, max ${times[times.length - 1]!.toFixed(1)} ms, ${bytes} bytes`;
  };

  console.log(`backend ${process.env.PLATFORM_TEST_BACKEND ?? "sqlite"}, ${CALLS} calls each`);
  for (const target of STEPS) {
    const start = performance.now();
    for (; made < target; made++) {
      const res = await rest(srv.url, "POST", "/iam/v2beta1/groups", { name: `org ${made}` }, as);
      if (res.status !== 200) throw new Error(`create ${made}: ${res.status} ${JSON.stringify(res.body)}`);
    }
    console.log(`${target} root orgs (created this step in ${((performance.now() - start) / 1000).toFixed(1)} s)`);
    console.log(`  ListGroups uid order      ${await measure("/iam/v2beta1/groups?page_size=50")}`);
    console.log(`  ListGroups name order     ${await measure("/iam/v2beta1/groups?page_size=50&order_by=name")}`);
    console.log(`  ListGroups name, skip=1500 ${await measure("/iam/v2beta1/groups?page_size=50&order_by=name&skip=1500")}`);
    console.log(`  GET /auth/v1/ok           ${await measure("/auth/v1/ok")}`);
  }
} finally {
  await srv.close();
}
