/**
 * Issue 31 §5: one parser for every on/off setting. Some settings were
 * on/off and others true/false, so `PLATFORM_PROXY_PROTOCOL=true` refused to
 * start; now each takes on/off, true/false, yes/no and 1/0 in any case, and
 * anything else is a start-up problem naming the setting.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ConfigError, loadConfig, type Config } from "../../src/config.js";

const FLAGS: [name: string, read: (c: Config) => boolean, fallback: boolean][] = [
  ["PLATFORM_PROXY_PROTOCOL", (c) => c.proxyProtocol, false],
  ["PLATFORM_DELIVERIES", (c) => c.deliveries.enabled, true],
  ["PLATFORM_ALLOW_LOOPBACK_ISSUERS", (c) => c.allowLoopbackIssuers, false],
  ["PLATFORM_SKIP_PERMISSION_CHECK", (c) => c.skipPermissionCheck, false],
  ["PLATFORM_METRICS_PUBLIC", (c) => c.metricsPublic, false],
];

const load = (env: Record<string, string>) => loadConfig({ PLATFORM_DATA_DIR: "/tmp/platform-config-flags", ...env });

for (const [name, read, fallback] of FLAGS) {
  test(`${name} reads on/off, true/false, yes/no and 1/0 in any case; unset is ${fallback ? "on" : "off"}`, () => {
    for (const raw of ["on", "ON", "true", "True", "yes", "1", " on "]) assert.equal(read(load({ [name]: raw })), true, raw);
    for (const raw of ["off", "Off", "false", "FALSE", "no", "0"]) assert.equal(read(load({ [name]: raw })), false, raw);
    assert.equal(read(load({})), fallback);
    assert.equal(read(load({ [name]: "" })), fallback);
  });

  test(`${name} refuses anything else, naming the setting`, () => {
    assert.throws(
      () => load({ [name]: "enabled" }),
      (err: unknown) => err instanceof ConfigError && err.message.includes(`${name}=enabled: must be on or off`),
    );
  });
}
