package main

// image.go owns the container images real nodes run without docker or a registry: `wasp-controlplane image`
// assembles one from files on this machine (a binary and, with --libraries, the shared libraries it loads,
// found as the dynamic loader finds them), with a non-root user, and writes it as an image tar that
// `ctr images import` loads (go-containerregistry's tarball format, as `docker save` writes). The pod sandboxes'
// pause image is made the same way when real nodes start.

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// imageSpec is what goes into an image: files (path in the image -> path here), the entrypoint and the user.
type imageSpec struct {
	tag        string
	entrypoint string
	user       string
	files      map[string]string
	env        []string
}

// nonrootUser is distroless' unprivileged user, which the Dockerfile's base image runs as.
const nonrootUser = "65532"

// runImageCommand is `wasp-controlplane image --tag REF --out FILE --entrypoint PATH [--user UID] [--libraries]
// --file DEST=SRC...`.
func runImageCommand(args []string) error {
	flags := flag.NewFlagSet("image", flag.ContinueOnError)
	spec := imageSpec{files: map[string]string{}}
	out := flags.String("out", "", "the image tar to write")
	flags.StringVar(&spec.tag, "tag", "", "the image's name, as pods name it (wasp:dev)")
	flags.StringVar(&spec.entrypoint, "entrypoint", "", "the program the image runs (a --file destination)")
	flags.StringVar(&spec.user, "user", nonrootUser, "the user it runs as")
	libraries := flags.Bool("libraries", false, "add the shared libraries the entrypoint loads (and its loader), as they are on this machine")
	flags.Func("file", "DEST=SRC: a file of this machine at DEST in the image (repeatable)", func(value string) error {
		dest, src, ok := strings.Cut(value, "=")
		if !ok || !strings.HasPrefix(dest, "/") {
			return fmt.Errorf("want DEST=SRC with an absolute DEST, got %q", value)
		}
		spec.files[dest] = src
		return nil
	})
	flags.Func("env", "NAME=VALUE in the image's environment (repeatable)", func(value string) error {
		spec.env = append(spec.env, value)
		return nil
	})
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *out == "" || spec.tag == "" || spec.entrypoint == "" {
		return errors.New("--out, --tag and --entrypoint are required")
	}
	if *libraries {
		binary, ok := spec.files[spec.entrypoint]
		if !ok {
			return fmt.Errorf("--entrypoint %s is not one of the --file destinations", spec.entrypoint)
		}
		needed, err := sharedLibraries(binary)
		if err != nil {
			return fmt.Errorf("%s: %w", binary, err)
		}
		for _, library := range needed {
			spec.files[library] = library
		}
	}
	return writeImage(spec, *out)
}

// writeImage writes spec as a one-layer image tar at path.
func writeImage(spec imageSpec, path string) error {
	layerTar, err := spec.layer()
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil })
	if err != nil {
		return err
	}
	image, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	env := append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, spec.env...)
	image, err = mutate.Config(image, v1.Config{Entrypoint: []string{spec.entrypoint}, User: spec.user, Env: env, WorkingDir: "/"})
	if err != nil {
		return err
	}
	configFile, err := image.ConfigFile()
	if err != nil {
		return err
	}
	configFile.Architecture, configFile.OS = "amd64", "linux"
	image, err = mutate.ConfigFile(image, configFile)
	if err != nil {
		return err
	}
	ref, err := name.ParseReference(spec.tag)
	if err != nil {
		return fmt.Errorf("image name %q: %w", spec.tag, err)
	}
	return tarball.WriteToFile(path, ref, image)
}

// layer is the image's one layer: the files, the folders above them, /etc/passwd and /etc/group naming root and
// the non-root user, and a world-writable /tmp, as distroless' base has them.
func (spec imageSpec) layer() ([]byte, error) {
	var buffer bytes.Buffer
	archive := tar.NewWriter(&buffer)
	epoch := time.Unix(0, 0)
	written := map[string]bool{}
	var folder func(dir string, mode int64) error
	folder = func(dir string, mode int64) error {
		if dir == "/" || written[dir] {
			return nil
		}
		if err := folder(filepath.Dir(dir), 0o755); err != nil {
			return err
		}
		written[dir] = true
		return archive.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(dir, "/") + "/", Mode: mode, ModTime: epoch})
	}
	file := func(dest string, mode int64, content []byte) error {
		if err := folder(filepath.Dir(dest), 0o755); err != nil {
			return err
		}
		header := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(dest, "/"), Mode: mode, Size: int64(len(content)), ModTime: epoch}
		if err := archive.WriteHeader(header); err != nil {
			return err
		}
		_, err := archive.Write(content)
		return err
	}
	if err := folder("/tmp", 0o1777); err != nil {
		return nil, err
	}
	if err := folder("/home/nonroot", 0o700); err != nil {
		return nil, err
	}
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	if err := file("/etc/passwd", 0o644, []byte(passwd)); err != nil {
		return nil, err
	}
	if err := file("/etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")); err != nil {
		return nil, err
	}
	destinations := make([]string, 0, len(spec.files))
	for dest := range spec.files {
		destinations = append(destinations, dest)
	}
	sort.Strings(destinations)
	for _, dest := range destinations {
		content, err := os.ReadFile(spec.files[dest])
		if err != nil {
			return nil, err
		}
		if err := file(dest, 0o755, content); err != nil {
			return nil, err
		}
	}
	if err := archive.Close(); err != nil {
		return nil, err
	}
	return buffer.Bytes(), nil
}

// sharedLibraries lists the libraries binary loads, transitively, and its dynamic loader, each by the path the
// loader would find it at on this machine (its DT_NEEDED names in the multiarch and plain library folders).
func sharedLibraries(binary string) ([]string, error) {
	folders := []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib", "/lib"}
	found := map[string]bool{}
	var visit func(path string) error
	visit = func(path string) error {
		file, err := elf.Open(path)
		if err != nil {
			return err
		}
		defer file.Close()
		if interp := file.Section(".interp"); interp != nil {
			data, err := interp.Data()
			if err != nil {
				return err
			}
			loader := strings.TrimRight(string(data), "\x00")
			found[loader] = true
		}
		needed, err := file.ImportedLibraries()
		if err != nil {
			return err
		}
		for _, library := range needed {
			resolved := ""
			for _, dir := range folders {
				if _, err := os.Stat(filepath.Join(dir, library)); err == nil {
					resolved = filepath.Join(dir, library)
					break
				}
			}
			if resolved == "" {
				return fmt.Errorf("library %s not found in %s", library, strings.Join(folders, ", "))
			}
			if !found[resolved] {
				found[resolved] = true
				if err := visit(resolved); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := visit(binary); err != nil {
		return nil, err
	}
	libraries := make([]string, 0, len(found))
	for library := range found {
		libraries = append(libraries, library)
	}
	sort.Strings(libraries)
	return libraries, nil
}
