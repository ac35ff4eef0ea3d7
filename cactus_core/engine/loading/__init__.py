"""Loading a verifier/draft pair: the embedded models or any Hugging Face pair, with the
checks that make two models a pair (`pairing`), the deployment policy and weight hashes."""
