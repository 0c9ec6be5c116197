import { create } from "@bufbuild/protobuf";
import {
  AccountAssociation_AmazonSchema,
  AccountAssociation_AzureSchema,
  AccountAssociation_ChainguardSchema,
  AccountAssociation_GitHubInstallationsSchema,
  AccountAssociation_GitHubSchema,
  AccountAssociation_GoogleSchema,
  type AccountAssociation,
} from "../../../gen/platformapi/iam/v2beta1/account_associations_pb.js";
import type { FieldViolation } from "../../domain/errors.js";
import { isUidp } from "../../domain/uidp.js";
import type { AccountProviders } from "../../store/store.js";

/** The provider fields of an association, by their proto names. */
export const PROVIDER_FIELDS = ["amazon", "google", "azure", "chainguard", "github"] as const;
export type ProviderField = (typeof PROVIDER_FIELDS)[number];

const AWS_ACCOUNT = /^[0-9]{12}$/;
const DECIMAL = /^[0-9]{1,20}$/;
/** A positive int64 in decimal, as JSON map keys carry GitHub app ids. */
const APP_ID = /^[1-9][0-9]{0,18}$/;
const INT64_MAX = 2n ** 63n - 1n;
/** Keys and values of provider maps and ids: visible text without line breaks. */
const LABEL = /^[^\p{C}]{1,256}$/u;
const MAX_ENTRIES = 100;

/** The providers an association message sets, as stored (only the fields named). */
export function providersOf(a: AccountAssociation, fields: Iterable<ProviderField>): AccountProviders {
  const out: AccountProviders = {};
  for (const f of fields) {
    if (f === "amazon" && a.amazon) out.amazon = { account: a.amazon.account };
    if (f === "google" && a.google) out.google = { projectId: a.google.projectId, projectNumber: a.google.projectNumber };
    if (f === "azure" && a.azure) out.azure = { tenantId: a.azure.tenantId, clientIds: { ...a.azure.clientIds } };
    if (f === "chainguard" && a.chainguard) out.chainguard = { serviceBindings: { ...a.chainguard.serviceBindings } };
    if (f === "github" && a.github) {
      const apps: NonNullable<AccountProviders["github"]>["appInstallations"] = {};
      for (const [appId, group] of Object.entries(a.github.appInstallations)) {
        apps[appId] = { installations: group.installations.map((i) => ({ installationId: i.installationId.toString(), name: i.name })) };
      }
      out.github = { appInstallations: apps };
    }
  }
  return out;
}

/** The provider fields of the API shape. */
export function providerMessages(p: AccountProviders): Pick<AccountAssociation, ProviderField> {
  return {
    amazon: p.amazon && create(AccountAssociation_AmazonSchema, p.amazon),
    google: p.google && create(AccountAssociation_GoogleSchema, p.google),
    azure: p.azure && create(AccountAssociation_AzureSchema, p.azure),
    chainguard: p.chainguard && create(AccountAssociation_ChainguardSchema, p.chainguard),
    github:
      p.github &&
      create(AccountAssociation_GitHubSchema, {
        appInstallations: Object.fromEntries(
          Object.entries(p.github.appInstallations).map(([appId, g]) => [
            appId,
            create(AccountAssociation_GitHubInstallationsSchema, {
              installations: g.installations.map((i) => ({ installationId: BigInt(i.installationId), name: i.name })),
            }),
          ]),
        ),
      }),
  };
}

function checkMap(out: FieldViolation[], field: string, map: Record<string, string>, checkValue: (v: string) => string | null): void {
  const entries = Object.entries(map);
  if (entries.length === 0) out.push({ field, description: "needs at least one entry" });
  if (entries.length > MAX_ENTRIES) out.push({ field, description: `at most ${MAX_ENTRIES} entries` });
  for (const [k, v] of entries) {
    if (!LABEL.test(k)) out.push({ field: `${field}[${k}]`, description: "keys must be 1 to 256 printable characters" });
    const why = checkValue(v);
    if (why) out.push({ field: `${field}[${k}]`, description: why });
  }
}

/** Violations of the providers an association sets. */
export function checkProviders(p: AccountProviders): FieldViolation[] {
  const out: FieldViolation[] = [];
  if (p.amazon && !AWS_ACCOUNT.test(p.amazon.account))
    out.push({ field: "amazon.account", description: "must be a 12-digit AWS account number" });
  if (p.google) {
    if (!LABEL.test(p.google.projectId))
      out.push({
        field: "google.project_id",
        description: p.google.projectId === "" ? "is required" : "must be 1 to 256 printable characters",
      });
    if (!DECIMAL.test(p.google.projectNumber))
      out.push({
        field: "google.project_number",
        description: p.google.projectNumber === "" ? "is required" : "must be a decimal project number",
      });
  }
  if (p.azure) {
    if (!LABEL.test(p.azure.tenantId))
      out.push({
        field: "azure.tenant_id",
        description: p.azure.tenantId === "" ? "is required" : "must be 1 to 256 printable characters",
      });
    checkMap(out, "azure.client_ids", p.azure.clientIds, (v) =>
      LABEL.test(v) ? null : "client IDs must be 1 to 256 printable characters",
    );
  }
  if (p.chainguard) {
    checkMap(out, "chainguard.service_bindings", p.chainguard.serviceBindings, (v) =>
      isUidp(v) ? null : "must be the uid of an identity",
    );
  }
  if (p.github) {
    const apps = Object.entries(p.github.appInstallations);
    if (apps.length > MAX_ENTRIES) out.push({ field: "github.app_installations", description: `at most ${MAX_ENTRIES} apps` });
    for (const [appId, group] of apps) {
      const at = `github.app_installations[${appId}]`;
      if (!APP_ID.test(appId) || BigInt(appId) > INT64_MAX) out.push({ field: at, description: "keys must be positive GitHub App ids" });
      if (group.installations.length === 0) out.push({ field: `${at}.installations`, description: "needs at least one installation" });
      group.installations.forEach((i, n) => {
        if (BigInt(i.installationId) <= 0n)
          out.push({ field: `${at}.installations[${n}].installation_id`, description: "is required and must be positive" });
        if (i.name.length > 256) out.push({ field: `${at}.installations[${n}].name`, description: "must be at most 256 characters" });
      });
    }
  }
  return out;
}
