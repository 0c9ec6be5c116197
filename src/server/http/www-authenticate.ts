/**
 * The WWW-Authenticate challenge of a 401 (RFC 6750 §3): `Bearer`, with
 * error="invalid_token" when the request carried credentials that were
 * refused (a request without any gets no error code, as §3.1 asks). The why
 * is in the response body's message, not repeated here.
 */
export function bearerChallenge(authorization: string | undefined, realm?: string): string {
  const params = [];
  if (realm !== undefined) params.push(`realm="${realm}"`);
  if (authorization !== undefined && authorization.trim() !== "") params.push('error="invalid_token"');
  return params.length === 0 ? "Bearer" : `Bearer ${params.join(", ")}`;
}
