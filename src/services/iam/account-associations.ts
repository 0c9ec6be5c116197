import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { Capability } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import {
  AccountAssociationSchema,
  type AccountAssociation,
  type AccountAssociationsService,
  type ListAccountAssociationsResponse,
} from "../../../gen/platformapi/iam/v2beta1/account_associations_pb.js";
import { InvalidArgumentError, NotFoundError, type FieldViolation } from "../../domain/errors.js";
import { fieldsToUpdate } from "../../domain/field-mask.js";
import { hierarchyFilter, requireUidp } from "../../domain/hierarchy.js";
import { checkDescription } from "../../domain/names.js";
import type {
  AccountAssociationChanges,
  AccountAssociationFilter,
  AccountAssociationOrder,
  AccountAssociationRecord,
} from "../../store/store.js";
import type { ServiceDeps } from "../context.js";
import { withEvents } from "../events.js";
import { listPage, type ListSpec } from "../paging/list-page.js";
import { type PagingSpec } from "../paging/paging.js";
import { timestampFromMs } from "../time.js";
import { checkProviders, PROVIDER_FIELDS, providerMessages, providersOf } from "./account-providers.js";

const PAGING: PagingSpec<AccountAssociationOrder> = {
  orderFields: ["group", "name", "created_at", "updated_at"],
  defaultOrder: "group",
};
const UPDATABLE = ["name", "description", ...PROVIDER_FIELDS] as const;
/** The contract's association name: required, 1–63 characters of printable text. */
const NAME = /^\P{C}{1,63}$/u;

/** The API shape of a stored association. */
function accountAssociationMessage(a: AccountAssociationRecord): AccountAssociation {
  return create(AccountAssociationSchema, {
    uid: a.uid,
    name: a.name,
    description: a.description,
    ...providerMessages(a.providers),
    createTime: timestampFromMs(a.createTime),
    updateTime: timestampFromMs(a.updateTime),
  });
}

/** The keyset position of an association in a given order ("group" is its uid). */
function accountAssociationCursor(a: AccountAssociationRecord, field: AccountAssociationOrder) {
  const key = field === "name" ? a.name : field === "created_at" ? a.createTime : field === "updated_at" ? a.updateTime : a.uid;
  return { key, uid: a.uid };
}

function checkText(a: AccountAssociation, fields: ReadonlySet<string>): FieldViolation[] {
  const out: FieldViolation[] = [];
  if (fields.has("name") && !NAME.test(a.name))
    out.push({ field: "name", description: "is required: 1 to 63 characters of printable text" });
  if (fields.has("description")) out.push(...checkDescription("description", a.description));
  return out;
}

/** AccountAssociationsService: the cloud accounts a group owns, kept as data (no live call to any cloud). */
export function createAccountAssociationsService(deps: ServiceDeps): ServiceImpl<typeof AccountAssociationsService> {
  const { store } = deps;
  const LIST: ListSpec<AccountAssociationRecord, AccountAssociationFilter, AccountAssociationOrder> = {
    name: "accountAssociations",
    paging: PAGING,
    capability: Capability.CAP_IAM_ACCOUNT_ASSOCIATIONS_LIST,
    list: (q, signal) => store.accountAssociations.list(q, signal),
    cursor: accountAssociationCursor,
  };
  return {
    async createAccountAssociation(req, ctx) {
      // The association's uid is its group's: one per group.
      const group = requireUidp("parent", req.parent);
      const input = req.accountAssociation ?? create(AccountAssociationSchema);
      const providers = providersOf(input, PROVIDER_FIELDS);
      const violations = [...checkText(input, new Set(UPDATABLE)), ...checkProviders(providers)];
      if (violations.length > 0) throw new InvalidArgumentError(violations);
      const now = deps.now();
      const record: AccountAssociationRecord = {
        uid: group,
        name: input.name,
        description: input.description,
        providers,
        createTime: now,
        updateTime: now,
      };
      const message = accountAssociationMessage(record);
      await withEvents(
        deps,
        ctx,
        (tx) => tx.accountAssociations.create(record),
        () => [
          { kind: "accountAssociation", action: "created", subject: record.uid, resource: { schema: AccountAssociationSchema, message } },
        ],
      );
      return message;
    },

    async getAccountAssociation(req) {
      const uid = requireUidp("uid", req.uid);
      const association = await store.accountAssociations.get(uid);
      if (!association) throw new NotFoundError("account association", uid);
      return accountAssociationMessage(association);
    },

    async listAccountAssociations(req, ctx): Promise<ListAccountAssociationsResponse> {
      const hierarchy = hierarchyFilter(req.uidp);
      const filter = req.name === "" ? {} : { name: req.name };
      const page = await listPage(deps, ctx, req, { hierarchy, filter }, LIST);
      return {
        $typeName: "platformapi.iam.v2beta1.ListAccountAssociationsResponse",
        accountAssociations: page.items.map(accountAssociationMessage),
        ...page.envelope,
      };
    },

    async updateAccountAssociation(req, ctx) {
      const input = req.accountAssociation ?? create(AccountAssociationSchema);
      const uid = requireUidp("account_association.uid", input.uid);
      const fields = fieldsToUpdate(AccountAssociationSchema, input, req.updateMask, UPDATABLE);
      const current = await store.accountAssociations.get(uid);
      if (!current) throw new NotFoundError("account association", uid);
      const changed = PROVIDER_FIELDS.filter((f) => fields.has(f));
      const given = providersOf(input, changed);
      const violations = [...checkText(input, fields), ...checkProviders(given)];
      if (violations.length > 0) throw new InvalidArgumentError(violations);
      const changes: AccountAssociationChanges = {};
      if (fields.has("name")) changes.name = input.name;
      if (fields.has("description")) changes.description = input.description;
      if (changed.length > 0) {
        // A named provider absent from the body is cleared.
        const providers = { ...current.providers };
        for (const f of changed) {
          if (given[f]) Object.assign(providers, { [f]: given[f] });
          else delete providers[f];
        }
        changes.providers = providers;
      }
      return withEvents(
        deps,
        ctx,
        async (tx) => accountAssociationMessage(await tx.accountAssociations.update(uid, changes, deps.now())),
        (message) => [
          { kind: "accountAssociation", action: "updated", subject: uid, resource: { schema: AccountAssociationSchema, message } },
        ],
      );
    },

    async deleteAccountAssociation(req, ctx) {
      const uid = requireUidp("uid", req.uid);
      await withEvents(
        deps,
        ctx,
        (tx) => tx.accountAssociations.delete(uid),
        (deleted) => (deleted === false ? [] : [{ kind: "accountAssociation", action: "deleted", subject: uid }]),
      );
      return {};
    },
  };
}
