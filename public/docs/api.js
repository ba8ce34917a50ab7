// @ts-check
// The API reference page (docs/api.md, "OpenAPI document"): renders this deployment's
// /v1/openapi.json with Swagger UI (a browser global from /vendor). A separate file, since the
// page's CSP allows no inline script.
const swaggerUi = /** @type {{ SwaggerUIBundle: (options: object) => unknown }} */ (/** @type {unknown} */ (globalThis))
  .SwaggerUIBundle;
swaggerUi({ url: "/v1/openapi.json", dom_id: "#reference", deepLinking: true });
