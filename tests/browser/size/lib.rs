//! One request through a reqwest-middleware client, with `RetryMiddleware` and the default policy
//! (feature `retry`) or without: the difference in size is what stagger costs a browser program.

use wasm_bindgen::prelude::*;

/// The status of a `GET` of `url`.
#[wasm_bindgen]
pub async fn status(url: String) -> Result<u16, JsValue> {
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new());
    #[cfg(feature = "retry")]
    let client = client.with(stagger::RetryMiddleware::new(stagger::RetryPolicy::default()));
    let response = (client.build().get(url).send().await)
        .map_err(|error| JsValue::from_str(&error.to_string()))?;
    Ok(response.status().as_u16())
}
