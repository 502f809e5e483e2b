//! What reqwest refuses before sending, after the exchange, or on the way: fatal; and a name that
//! does not resolve: a connect error.

use super::*;

#[tokio::test]
async fn a_url_reqwest_refuses_at_send_is_a_builder_error_and_fatal() {
    // A URL that parses, with a scheme reqwest has no connector for: refused when it is sent, so the
    // error reaches the middleware (reqwest-middleware builds the request first, and a URL that does not
    // parse never reaches it).
    let url = "ftp://127.0.0.1/file";
    let error = send(&client().build().unwrap(), Method::GET, url).await;
    assert!(error.is_builder(), "{error:?}");
    assert_says(&error, "URL scheme is not allowed");
    assert_eq!(DefaultClassifier::error(&error), Outcome::Fatal);

    #[cfg(feature = "reqwest-middleware")]
    assert_eq!(
        through_the_middleware::attempts(client().build().unwrap(), url).await,
        1,
        "sent once"
    );
}

/// Answers every request on every connection with a redirect to itself.
async fn redirect_loop() -> (String, Seen) {
    let (addr, requests) = serve(|mut stream, requests| async move {
        loop {
            if read_request(&mut stream).await.is_err() {
                return Ok(());
            }
            requests.one();
            stream
                .write_all(b"HTTP/1.1 302 Found\r\nlocation: /\r\ncontent-length: 0\r\n\r\n")
                .await?;
        }
    })
    .await;
    (format!("http://{addr}/"), requests)
}

#[tokio::test]
async fn too_many_redirects_is_a_redirect_error_and_fatal() {
    let (url, requests) = redirect_loop().await;
    // The first request and the two redirects followed; the third redirect is the error.
    let follow_two = || {
        client()
            .redirect(reqwest::redirect::Policy::limited(2))
            .build()
            .unwrap()
    };

    let error = send(&follow_two(), Method::GET, &url).await;
    assert!(error.is_redirect(), "{error:?}");
    assert_says(&error, "too many redirects");
    assert_eq!(DefaultClassifier::error(&error), Outcome::Fatal);
    assert_eq!(requests.take(), 3);

    #[cfg(feature = "reqwest-middleware")]
    {
        assert_eq!(
            through_the_middleware::attempts(follow_two(), &url).await,
            1
        );
        assert_eq!(requests.take(), 3, "one call's requests, not retried");
    }
}

#[tokio::test]
async fn a_body_that_is_not_the_json_asked_for_is_a_decode_error_and_fatal() {
    let (addr, requests) = serve(|mut stream, requests| async move {
        read_request(&mut stream).await?;
        requests.one();
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 8\r\n\r\nnot json")
            .await?;
        stream.shutdown().await
    })
    .await;
    let url = format!("http://{addr}/");
    let client = client().build().unwrap();
    let get_json = || async {
        let response = client.get(&url).send().await?;
        response.json::<serde_json::Value>().await
    };

    let error = get_json().await.unwrap_err();
    assert!(error.is_decode(), "{error:?}");
    // serde_json's words.
    assert_says(&error, "expected ident");
    assert_eq!(DefaultClassifier::error(&error), Outcome::Fatal);
    assert_eq!(requests.take(), 1);

    // What a body is read by: an operation of its own, retried by `stagger::retry` with the default
    // classification of its error.
    let policy = stagger::RetryPolicy::builder()
        .backoff(stagger::Backoff::fixed(Duration::from_millis(1)))
        .budget(None)
        .max_retries(2)
        .build()
        .unwrap();
    let error = stagger::retry(&policy, get_json, |result| match result {
        Ok(_) => Outcome::Success,
        Err(error) => DefaultClassifier::error(error),
    })
    .await
    .unwrap_err();
    assert!(error.inner().is_some_and(reqwest::Error::is_decode));
    assert_eq!(error.info().attempts(), 1);
    assert_eq!(requests.take(), 1, "not retried");
}

#[tokio::test]
async fn a_host_name_that_does_not_resolve_is_a_connect_error_safe_to_retry() {
    // `.invalid` never resolves (RFC 6761 §6.4).
    let url = "http://stagger-test.invalid/";
    let error = send(&client().build().unwrap(), Method::GET, url).await;
    assert!(error.is_connect(), "{error:?}");
    // hyper-util's words for a failed look-up.
    assert_says(&error, "dns error");
    assert_eq!(
        DefaultClassifier::error(&error),
        Outcome::RetrySafe(Reason::Connect)
    );

    #[cfg(feature = "reqwest-middleware")]
    assert_eq!(
        through_the_middleware::attempts(client().build().unwrap(), url).await,
        3,
        "retried twice"
    );
}
