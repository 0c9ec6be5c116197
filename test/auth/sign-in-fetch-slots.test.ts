/**
 * The sign-in leg's outbound fetches (discovery, the code exchange) take a slot of the organization's share of
 * issuer fetches (fetch-slots.ts), as the token exchange's do: anonymous people starting sign-ins at an
 * organization whose provider never answers hold at most its two slots; the next start is refused at once, and
 * another organization's and the operator's providers still get theirs. No timing: the provider holds every
 * connection open until the test ends.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";
import { RelyingParty, UpstreamSignInError, type UpstreamClient } from "../../src/auth/sign-in/relying-party.js";
import { UpstreamVerifier } from "../../src/auth/upstream.js";

let silent: net.Server;
const held: net.Socket[] = [];
let issuer: string;
before(async () => {
  // Accepts every connection and never answers.
  silent = net.createServer((socket) => held.push(socket));
  await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
  issuer = `http://127.0.0.1:${(silent.address() as net.AddressInfo).port}`;
});
after(async () => {
  for (const socket of held) socket.destroy();
  await new Promise((resolve) => silent.close(resolve));
});

const client = (tenant: string | undefined): UpstreamClient => ({
  key: tenant ? `idp:${tenant}/p` : "op:test",
  issuer: `${issuer}/${tenant ?? "operator"}`,
  clientId: "platform",
  clientSecret: "",
  scopes: [],
  pkce: true,
  operator: tenant === undefined,
  tenant,
});

test("an organization's never-answering provider holds its two fetch slots; the third start is refused at once, others go on", async () => {
  const upstream = new UpstreamVerifier(Date.now, { allowLoopback: true, fetchTimeoutMs: 600_000 });
  const rp = new RelyingParty({
    redirectUri: "http://127.0.0.1/sign-in/callback",
    policy: { allowLoopback: true },
    upstream,
    now: Date.now,
  });
  const settled: string[] = [];
  const hanging = [rp.start(client("aaaa")), rp.start(client("aaaa"))].map((p) =>
    p.then(
      () => settled.push("answered"),
      () => settled.push("refused"),
    ),
  );
  while (held.length < 2) await new Promise((resolve) => setImmediate(resolve));
  await assert.rejects(rp.start(client("aaaa")), UpstreamSignInError, "the third start of the same organization");
  assert.deepEqual(settled, [], "the first two still wait on the provider");
  // Another organization and the operator's provider are not starved: each gets a slot (and a connection).
  const others = [rp.start(client("bbbb")), rp.start(client(undefined))].map((p) => p.catch(() => {}));
  while (held.length < 4) await new Promise((resolve) => setImmediate(resolve));
  assert.equal(upstream.fetchesInFlight, 4);
  for (const socket of held) socket.destroy();
  await Promise.all([...hanging, ...others]);
  assert.deepEqual(settled, ["refused", "refused"]);
  assert.equal(upstream.fetchesInFlight, 0, "every slot released");
});
