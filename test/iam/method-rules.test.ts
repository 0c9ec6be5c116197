import assert from "node:assert/strict";
import { test } from "node:test";
import type { DescMethod } from "@bufbuild/protobuf";
import { methodRule } from "../../src/auth/rules.js";
import type { ServiceDeps } from "../../src/services/context.js";
import { createFeedNotifier } from "../../src/services/events/watch.js";
import { CONTRACT_FILES, createServiceBindings } from "../../src/services/index.js";
import { startTestServer } from "../support/server.js";

const services = CONTRACT_FILES.flatMap((f) => f.services);

test("every RPC of the contract declares how it is authorized", () => {
  assert.ok(services.length >= 14, `found ${services.length} services`);
  for (const service of services) {
    for (const method of service.methods) {
      const rule = methodRule(method);
      if (rule.mode === "enabled" && !rule.unscoped) {
        assert.ok(rule.capabilities.length > 0, `${method.name} is scoped but needs no capability`);
        assert.ok(rule.scopePath && rule.scopePath.length > 0, `${method.name} has no scope field`);
      }
    }
  }
});

test("scope fields point at the request's uid, parent or resource uid", () => {
  const scopes = new Map<string, string>();
  for (const service of services) {
    for (const method of service.methods) {
      const rule = methodRule(method);
      if (rule.mode === "enabled" && rule.scopePath) scopes.set(`${service.name}.${method.name}`, rule.scopePath.join("."));
    }
  }
  assert.equal(scopes.get("GroupsService.GetGroup"), "uid");
  assert.equal(scopes.get("GroupsService.UpdateGroup"), "group.uid");
  assert.equal(scopes.get("IdentitiesService.CreateIdentity"), "parent");
  assert.equal(scopes.get("GroupsService.CreateGroup"), undefined, "CreateGroup is unscoped");
});

/** The change feed needs no capability of its own: each event is shown where its kind's List capability is held. */
const FEED = ["platformapi.events.v1.EventsService.ListEvents", "platformapi.events.v1.EventsService.WatchEvents"];

test("lists are unscoped and name their list capability (the change feed: each kind's, per event)", () => {
  for (const service of services) {
    for (const method of service.methods.filter((m) => m.name.startsWith("List") || FEED.includes(`${service.typeName}.${m.name}`))) {
      const rule = methodRule(method);
      assert.equal(rule.mode, "enabled");
      if (rule.mode === "enabled") {
        assert.equal(rule.unscoped, true, method.name);
        assert.equal(rule.capabilities.length, FEED.includes(`${service.typeName}.${method.name}`) ? 0 : 1, method.name);
      }
    }
  }
});

/**
 * RPCs that need no API token, and scoped-by-hand RPCs (unscoped, not a List):
 * each authorizes in its handler, so adding one is a reviewed change here.
 */
const NO_TOKEN = [
  "platformapi.oidc.v1.SecurityTokenService.Exchange",
  // Its bearer is a refresh token, which the handler checks itself (src/auth/refresh-tokens.ts).
  "platformapi.oidc.v1.SecurityTokenService.ExchangeRefreshToken",
];
const AUTHORIZED_IN_HANDLER = [
  "platformapi.auth.v1.AuthService.Register",
  "platformapi.auth.v1.AuthService.Validate",
  "platformapi.iam.v2beta1.GroupsService.CreateGroup",
  "platformapi.iam.v2beta1.IdentitiesService.LookupIdentity",
  "platformapi.iam.v2beta1.RolesService.GetRole",
];

test("the running server serves exactly the bound services' methods, each with a rule", async () => {
  // The factories only capture deps; nothing is called here.
  const bindings = createServiceBindings({
    now: Date.now,
    store: { events: {} },
    events: { watch: { notifier: createFeedNotifier() } },
  } as unknown as ServiceDeps);
  const contract = new Set(services.map((s) => s.typeName));
  const bound = new Map<string, DescMethod>();
  for (const { service, impl } of bindings) {
    assert.ok(contract.has(service.typeName), `${service.typeName} is bound but not in CONTRACT_FILES`);
    for (const method of service.methods) {
      assert.equal(typeof impl[method.localName], "function", `${service.typeName}.${method.name} has an implementation`);
      bound.set(`${service.typeName}.${method.name}`, method);
    }
  }
  const srv = await startTestServer();
  try {
    const served = new Set(srv.server.restOperations.map((op) => op.rpc));
    assert.deepEqual([...served].sort(), [...bound.keys()].sort(), "every bound method has a REST route, and every route a bound method");
  } finally {
    await srv.close();
  }
  const rules = [...bound].map(([name, method]) => ({
    name,
    rule: methodRule(method),
    list: method.name.startsWith("List") || FEED.includes(name),
  }));
  assert.deepEqual(
    rules
      .filter((r) => r.rule.mode === "disabled")
      .map((r) => r.name)
      .sort(),
    NO_TOKEN,
  );
  const byHand = rules.filter((r) => r.rule.mode === "enabled" && r.rule.unscoped && !r.list).map((r) => r.name);
  assert.deepEqual(byHand.sort(), AUTHORIZED_IN_HANDLER);
});
