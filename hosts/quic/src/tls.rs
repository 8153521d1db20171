//! TLS for a testbed: the server makes a self-signed certificate at start; the client
//! accepts any certificate (there is nothing to authenticate on an emulated path) but
//! still checks the handshake signatures, so the TLS exchange is the real one in size
//! and computation. Either side can log its TLS secrets (`--keylog FILE`, [`crate::keylog`])
//! so that a capture of its connections decrypts; neither does unless asked.

use std::path::Path;
use std::sync::Arc;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, KeyLog, SignatureScheme};

use crate::keylog::KeyLogWriter;
use crate::ALPN;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Where the secrets go: the file given, or nowhere (rustls's default).
fn key_log(path: Option<&Path>) -> Result<Option<Arc<dyn KeyLog>>, String> {
    path.map(|p| KeyLogWriter::open(p).map(|w| Arc::new(w) as Arc<dyn KeyLog>))
        .transpose()
}

/// The server's TLS configuration with a fresh self-signed certificate for `names`;
/// its secrets are appended to `keylog` when one is given.
pub fn server_crypto(names: &[String], keylog: Option<&Path>) -> Result<QuicServerConfig, String> {
    let certified = rcgen::generate_simple_self_signed(names.to_vec())
        .map_err(|e| format!("cannot generate a certificate: {e}"))?;
    let cert = CertificateDer::from(certified.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der()));
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .map_err(|e| format!("TLS certificate: {e}"))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    if let Some(log) = key_log(keylog)? {
        tls.key_log = log;
    }
    QuicServerConfig::try_from(tls).map_err(|e| format!("TLS configuration for QUIC: {e}"))
}

/// The client's TLS configuration; its secrets are appended to `keylog` when one is given.
pub fn client_crypto(keylog: Option<&Path>) -> Result<QuicClientConfig, String> {
    let provider = provider();
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("TLS configuration: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    if let Some(log) = key_log(keylog)? {
        tls.key_log = log;
    }
    QuicClientConfig::try_from(tls).map_err(|e| format!("TLS configuration for QUIC: {e}"))
}

#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
