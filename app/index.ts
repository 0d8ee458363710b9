/**
 * The Vigil process: the service (`service/`) with the REST API (`control-plane/`) mounted on its
 * HTTP server. Composing the two lives here, so neither folder depends on the other's insides.
 */
export { startVigil, type RunningVigil } from './start-vigil.js';
export { homePage, mountHomePage, HOME_DOCS, HOME_LINKS, type HomeLink } from './home-page.js';
