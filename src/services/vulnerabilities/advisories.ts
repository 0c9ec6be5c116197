import type { ServiceImpl } from "@connectrpc/connect";
import { Capability } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import {
  EventTypeFilter,
  ReviewState,
  type AdvisoriesService,
  type ListAdvisoriesRequest,
  type ListAdvisoriesResponse,
} from "../../../gen/platformapi/vulnerabilities/v2beta1/advisories_pb.js";
import { InvalidArgumentError, NotFoundError, type FieldViolation } from "../../domain/errors.js";
import { hierarchyFilter, requireUidp } from "../../domain/hierarchy.js";
import type { AdvisoryFilter, AdvisoryOrder, AdvisoryRecord } from "../../store/store.js";
import type { ServiceDeps } from "../context.js";
import { listPage, type ListSpec } from "../paging/list-page.js";
import { type PagingSpec } from "../paging/paging.js";
import { advisoryCursor, advisoryMessage } from "./advisory-messages.js";

const PAGING: PagingSpec<AdvisoryOrder> = {
  orderFields: ["uid", "advisory_id", "created_at", "updated_at"],
  defaultOrder: "uid",
};

/** The AdvisoryEvent oneof case each EventTypeFilter value names. */
const EVENT_TYPES: Partial<Record<EventTypeFilter, string>> = {
  [EventTypeFilter.DETECTION]: "detection",
  [EventTypeFilter.TRUE_POSITIVE_DETERMINATION]: "truePositiveDetermination",
  [EventTypeFilter.FIXED]: "fixed",
  [EventTypeFilter.FALSE_POSITIVE_DETERMINATION]: "falsePositiveDetermination",
  [EventTypeFilter.ANALYSIS_NOT_PLANNED]: "analysisNotPlanned",
  [EventTypeFilter.FIX_NOT_PLANNED]: "fixNotPlanned",
  [EventTypeFilter.PENDING_UPSTREAM_FIX]: "pendingUpstreamFix",
  [EventTypeFilter.PATCHED]: "patched",
};
const REVIEW_STATES: readonly ReviewState[] = [
  ReviewState.PENDING,
  ReviewState.APPROVED,
  ReviewState.REQUEST_CHANGES,
  ReviewState.REJECTED,
];

/** List filters the store takes as given, by request field and its proto name. */
const LIST_FILTERS = [
  ["advisoryIds", "advisory_ids"],
  ["legacyAdvisoryIds", "legacy_advisory_ids"],
  ["artifactNames", "artifact_names"],
  ["artifactTypes", "artifact_types"],
  ["artifactArchitectures", "artifact_architectures"],
  ["componentNames", "component_names"],
  ["componentTypes", "component_types"],
  ["componentLocations", "component_locations"],
  ["aliases", "aliases"],
  ["eventAuthors", "event_authors"],
  ["excludeEventAuthors", "exclude_event_authors"],
  ["eventReviewers", "event_reviewers"],
] as const;
const MAX_VALUES = 1000;
const MAX_QUERY = 1000;

/** The request's filters for the store; INVALID_ARGUMENT on unknown enum values or oversized lists. */
function advisoryFilter(req: ListAdvisoriesRequest): AdvisoryFilter {
  const violations: FieldViolation[] = [];
  const filter: AdvisoryFilter = {};
  for (const [key, field] of LIST_FILTERS) {
    if (req[key].length > MAX_VALUES) violations.push({ field, description: `at most ${MAX_VALUES} values` });
    else if (req[key].length > 0) filter[key] = [...req[key]];
  }
  if (req.origin !== undefined && req.origin !== "") filter.origin = req.origin;
  if (req.eventReviewStates.length > 0) {
    if (!req.eventReviewStates.every((s) => REVIEW_STATES.includes(s))) {
      violations.push({ field: "event_review_states", description: "must be review states other than REVIEW_STATE_UNSPECIFIED" });
    } else filter.eventReviewStates = [...req.eventReviewStates];
  }
  if (req.eventTypes.length > 0) {
    const types = req.eventTypes.map((t) => EVENT_TYPES[t]);
    if (types.some((t) => t === undefined)) {
      violations.push({ field: "event_types", description: "must be event types other than EVENT_TYPE_FILTER_UNSPECIFIED" });
    } else filter.eventTypes = types as string[];
  }
  if (req.latestEventType !== undefined) {
    const type = EVENT_TYPES[req.latestEventType];
    if (type === undefined) {
      violations.push({ field: "latest_event_type", description: "must be an event type other than EVENT_TYPE_FILTER_UNSPECIFIED" });
    } else filter.latestEventType = type;
  }
  if (req.query.length > MAX_QUERY) violations.push({ field: "query", description: `at most ${MAX_QUERY} characters` });
  else if (req.query !== "") filter.query = req.query;
  if (violations.length > 0) throw new InvalidArgumentError(violations);
  return filter;
}

/** AdvisoriesService: List and Get only, over the advisories the import command writes (the API has no writes). */
export function createAdvisoriesService(deps: ServiceDeps): ServiceImpl<typeof AdvisoriesService> {
  const { store } = deps;
  const LIST: ListSpec<AdvisoryRecord, AdvisoryFilter, AdvisoryOrder> = {
    name: "advisories",
    paging: PAGING,
    capability: Capability.CAP_ADVISORIES_LIST,
    list: (q, signal) => store.advisories.list(q, signal),
    cursor: advisoryCursor,
  };
  return {
    async getAdvisory(req) {
      // advisories.list at the advisory's uid was checked before this lookup.
      const uid = requireUidp("uid", req.uid);
      const advisory = await store.advisories.get(uid);
      if (!advisory) throw new NotFoundError("advisory", uid);
      return advisoryMessage(advisory);
    },

    async listAdvisories(req, ctx): Promise<ListAdvisoriesResponse> {
      const hierarchy = hierarchyFilter(req.uidp);
      const filter = advisoryFilter(req);
      const page = await listPage(deps, ctx, req, { hierarchy, filter }, LIST);
      return {
        $typeName: "platformapi.vulnerabilities.v2beta1.ListAdvisoriesResponse",
        advisories: page.items.map(advisoryMessage),
        ...page.envelope,
      };
    },
  };
}
