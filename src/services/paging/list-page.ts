import type { HandlerContext } from "@connectrpc/connect";
import type { Capability } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import type { HierarchyFilter } from "../../domain/hierarchy-filter.js";
import type { Cursor, ListQuery, ListResult } from "../../store/store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { pageEnvelope, planPage, type PageEnvelope, type PageRequest, type PagingSpec } from "./paging.js";

/** What a List RPC lists, and how. */
export interface ListSpec<TRecord, TFilter, TOrder extends string> {
  /** Names the query in its page tokens (a token of another list is refused). */
  name: string;
  paging: PagingSpec<TOrder>;
  /** The capability that makes a record visible to the caller. */
  capability: Capability;
  list(query: ListQuery<TFilter, TOrder>, signal: AbortSignal): Promise<ListResult<TRecord>>;
  cursor(record: TRecord, field: TOrder): Cursor;
}

/**
 * The sequence every List RPC runs: plan the page (size, skip, order, token),
 * narrow it to what the caller may see, list, and seal the next page's token.
 * tokenKey adds request fields that shape the query but are not in filter.
 */
export async function listPage<TRecord, TFilter, TOrder extends string>(
  deps: ServiceDeps,
  ctx: HandlerContext,
  req: PageRequest,
  query: { hierarchy: HierarchyFilter; filter: TFilter; tokenKey?: readonly unknown[] },
  spec: ListSpec<TRecord, TFilter, TOrder>,
): Promise<{ items: TRecord[]; envelope: PageEnvelope }> {
  const { hierarchy, filter } = query;
  const plan = planPage(req, spec.paging, deps.pageTokens, [spec.name, hierarchy, filter, ...(query.tokenKey ?? [])]);
  const visibleWithin = await deps.authz.visibleWithin(principalOf(ctx), spec.capability);
  const result = await spec.list({ hierarchy, filter, ...plan, visibleWithin }, ctx.signal);
  return { items: result.items, envelope: pageEnvelope(plan, result, spec.cursor, deps.pageTokens) };
}
