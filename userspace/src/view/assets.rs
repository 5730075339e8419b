//! The page's files, embedded in the binary: the page itself from `web/` (`index.html`,
//! `view.js`), and three.js from `web/node_modules/three` as `npm ci` installed it from
//! `web/package-lock.json` (`build.rs` writes the list; without `npm ci` the list is empty and
//! [`check`] refuses `--view`).
//!
//! URL paths: `/` (index.html), `/view.js`, `/three/three.module.js`, `/three/three.core.js`,
//! `/three/OrbitControls.js` and `/three/LICENSE` (three.js's MIT licence).

mod generated {
    include!(concat!(env!("OUT_DIR"), "/view_assets.rs"));
}

/// The page (HTML with the import map).
const INDEX_HTML: &[u8] = include_bytes!("../../../web/index.html");
/// The page's module: fetching frames and drawing them with three.js.
const VIEW_JS: &[u8] = include_bytes!("../../../web/view.js");

/// One embedded file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asset {
    /// `Content-Type` header value.
    pub content_type: &'static str,
    /// The file's bytes.
    pub bytes: &'static [u8],
}

const JS: &str = "text/javascript; charset=utf-8";

/// The file served at URL path `path` (without query), if any.
pub fn get(path: &str) -> Option<Asset> {
    let (content_type, bytes) = match path {
        "/" | "/index.html" => ("text/html; charset=utf-8", INDEX_HTML),
        "/view.js" => (JS, VIEW_JS),
        _ => {
            let name = path.strip_prefix("/three/")?;
            let (_, bytes) = generated::THREE.iter().find(|(n, _)| *n == name)?;
            let ct = if name.ends_with(".js") {
                JS
            } else {
                "text/plain; charset=utf-8"
            };
            (ct, *bytes)
        }
    };
    Some(Asset {
        content_type,
        bytes,
    })
}

/// Whether three.js was embedded at build time.
///
/// Errors: it was not, naming the first missing file and how to fetch it (`cargo xtask
/// setup`, which runs `npm ci` in `web/`, then a rebuild).
pub fn check() -> anyhow::Result<()> {
    match generated::MISSING {
        None => Ok(()),
        Some(file) => anyhow::bail!(
            "--view: this lidarxdp was built without the page's three.js files ({file} was \
             missing at build time); run `cargo xtask setup` (npm ci in web/) and build again"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_and_three_are_served() {
        assert_eq!(get("/").unwrap().bytes, INDEX_HTML);
        assert!(
            get("/view.js")
                .unwrap()
                .content_type
                .starts_with("text/javascript")
        );
        assert!(get("/nothing").is_none());
        assert!(get("/three/../index.html").is_none());
        // The import map names every three.js file the build embeds.
        let html = std::str::from_utf8(INDEX_HTML).unwrap();
        assert!(html.contains("\"three\": \"/three/three.module.js\""));
        if check().is_ok() {
            for name in [
                "three.module.js",
                "three.core.js",
                "OrbitControls.js",
                "LICENSE",
            ] {
                let a = get(&format!("/three/{name}")).unwrap();
                assert!(!a.bytes.is_empty(), "{name}");
            }
        } else {
            assert!(get("/three/three.module.js").is_none());
            assert!(format!("{:#}", check().unwrap_err()).contains("cargo xtask setup"));
        }
    }
}
