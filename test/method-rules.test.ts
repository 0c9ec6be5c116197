import assert from "node:assert/strict";
import { test } from "node:test";
import { methodRule } from "../src/auth/rules.js";
import { CONTRACT_FILES } from "../src/services/index.js";

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

test("lists are unscoped and name their list capability", () => {
  for (const service of services) {
    for (const method of service.methods.filter((m) => m.name.startsWith("List"))) {
      const rule = methodRule(method);
      assert.equal(rule.mode, "enabled");
      if (rule.mode === "enabled") {
        assert.equal(rule.unscoped, true, method.name);
        assert.equal(rule.capabilities.length, 1, method.name);
      }
    }
  }
});
